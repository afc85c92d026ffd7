"""The gavel peer: trio + libp2p host, roles, storage; its command line in `node.cli`.

Read bottom-up; each line imports only from the lines above it (and `protocol`,
`contracts`, `repops_cupy`):

  errors           the node's typed errors, all under NodeError
  config, datadir  settings declared once; the data directory (config, key, lock, api file)
  keyfile          the key file: a node's 32-byte seed on disk, mode 0600
  logs, metrics    logging set up once per process; Prometheus metrics
  storage          the SQLite database: jobs, commitments, disputes, peers
  framing          length-prefixed frames over one libp2p stream
  streams          stream protocols on frames: handlers, request/response
  peer_identity    one seed -> keys -> PeerID
  gossip           publish/subscribe over GossipSub
  host             the libp2p host: transports, stream protocols, peers
  blobs            content-addressed blobs and their chunked, verified transfer
  training_oracle  real training as the dispute game's oracle
  roles/           provider, auditor, client (and what they share: chain, runs, disputes)
  runtime          one running node: lock, storage, host, blobs, metrics, roles

Beside the stack, never imported by it:

  cheats           ways to cheat at a job, for tests and simulations: passed in
                   (`runtime.Node(cheats=...)`), never imported by honest code
  testnet/         many nodes on one machine, some cheating, and a report
  cli/             the `gavel` command: front ends and offline tools (dispute-sim)
"""
