"""A testnet node process: the `gavel` command, with the node's peers-table recorder switched off.

    python -m node.testnet.child node start --data-dir DIR
    python -m node.testnet.child submit JOB --data-dir DIR ...

The recorder (``node.runtime.Node._record_peers``) stops its node with libp2p's
``PeerStoreError`` when a peer connected only inbound has no known address, which in a
testnet (clients dialling providers) happens within seconds. A testnet needs no peers
table; this entry point runs the same command with the recorder idle, as the in-process
network does. Drop it once the recorder tolerates such peers.
"""
from __future__ import annotations

import sys

from .. import runtime
from ..cli import main
from .launcher import PEER_RECORD_OFF

if __name__ == "__main__":
    runtime.PEER_RECORD_INTERVAL = PEER_RECORD_OFF
    sys.exit(main())
