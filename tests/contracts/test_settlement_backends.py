"""One job's whole life on both back-ends: the embedded EVM, and anvil, a real JSON-RPC node
started by the test on a free loopback port and stopped by its PID; plus what only the JSON-RPC
back-end has (local private keys, a state file that survives a restart).

The anvil cases are skipped, saying why, only when anvil is not installed (``npm install`` at
the repository root); CI sets GAVEL_REQUIRE_ANVIL=1 and fails instead."""

import os

import pytest

from contracts import (
    ETHER,
    AnvilProcess,
    ContractRevert,
    DisputeOpened,
    EmbeddedChain,
    JobStatus,
    NodeStatus,
    Outcome,
    ProviderPaid,
    Role,
    RpcChain,
    Settlement,
    StakeSlashed,
    Withdrawn,
    find_anvil,
)

pytestmark = pytest.mark.settlement

ANVIL = find_anvil()
if ANVIL is None and os.environ.get("GAVEL_REQUIRE_ANVIL"):
    raise RuntimeError("GAVEL_REQUIRE_ANVIL is set but anvil is not installed (run `npm install`)")
needs_anvil = pytest.mark.skipif(
    ANVIL is None, reason="anvil not installed: run `npm install` at the repository root (package.json pins it)")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie not yet reaped still answers signal 0; /proc tells the truth.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def anvil():
    process = AnvilProcess().start()
    pid = process.pid
    try:
        yield process
    finally:
        process.stop()
        assert not _pid_alive(pid), f"anvil (pid {pid}) still running after stop()"


@pytest.fixture
def rpc_chain(anvil):
    chain = RpcChain(anvil.url)
    mark = chain.snapshot()
    yield chain
    chain.revert(mark)
    chain.close()


@pytest.fixture(params=["embedded", pytest.param("anvil", marks=[pytest.mark.anvil, needs_anvil])])
def chain(request):
    if request.param == "embedded":
        return EmbeddedChain()
    return request.getfixturevalue("rpc_chain")


@pytest.mark.anvil
@needs_anvil
def test_anvil_listens_on_loopback_only(anvil):
    assert anvil.url.startswith("http://127.0.0.1:")
    assert RpcChain(anvil.url).rpc("eth_chainId") == hex(31337)


def test_job_lifecycle(chain):
    deployer, client, p1, p2, auditor = chain.accounts[:5]
    s = Settlement.deploy(chain, account=deployer, unbonding_delay=100, min_stake=ETHER)
    for account, roles in ((p1, Role.PROVIDER), (p2, Role.PROVIDER), (auditor, Role.AUDITOR)):
        s.connect(account).register(bytes([len(roles.name or "")]) * 32, roles, stake=3 * ETHER)
    assert s.node(p1).status == NodeStatus.ACTIVE

    now = chain.now()
    job = b"\x11" * 32
    s.connect(client).open_job(job, price=2 * ETHER + 1, providers_wanted=2, provider_stake=ETHER,
                               accept_by=now + 100, commit_by=now + 200, challenge_by=now + 300, ruling_period=60)
    s.connect(p1).accept(job)
    s.connect(p2).accept(job)
    s.connect(p1).commit(job, b"\x01" * 32)
    s.connect(p2).commit(job, b"\x02" * 32)
    with pytest.raises(ContractRevert) as refused:
        s.connect(p2).commit(job, b"\x03" * 32)
    assert (refused.value.name, refused.value.arguments) == ("JobAlreadyCommitted", {"provider": p2})
    with pytest.raises(ContractRevert) as refused:
        s.settle(job)
    assert refused.value.name == "JobTooEarly"

    provider_dispute = s.connect(p1).open_dispute(job, p2).one(DisputeOpened).dispute_id
    audit = s.connect(auditor).open_dispute(job, p2).one(DisputeOpened)
    assert audit.bond == ETHER
    ruled = s.connect(client).rule(provider_dispute, Outcome.CHALLENGER_WINS, step=4, node=17,
                                   transcript_hash=b"\x0a" * 32)
    assert ruled.one(StakeSlashed).to_beneficiary == ETHER // 2
    with pytest.raises(ContractRevert) as refused:
        s.connect(p1).rule(audit.dispute_id, Outcome.CHALLENGER_WINS, step=0, node=0, transcript_hash=b"\x0a" * 32)
    assert refused.value.name == "DisputeNotReferee"

    chain.advance_time(61)
    s.lapse(audit.dispute_id)
    chain.advance_time(300)
    settled = s.settle(job)
    assert settled.all(ProviderPaid) == [ProviderPaid(job, p1, 2 * ETHER + 1)]
    assert s.job(job).status == JobStatus.FINALIZED

    before = chain.balance(p1)
    withdrawn = s.connect(p1).withdraw()
    assert withdrawn.one(Withdrawn).amount == 2 * ETHER + 1 + ETHER // 2
    assert chain.balance(p1) == before + 2 * ETHER + 1 + ETHER // 2 - withdrawn.fee
    assert s.balance() == 3 * ETHER + 2 * ETHER + 3 * ETHER  # p1 and the auditor whole, p2 less its lock
    kinds = [type(entry.event).__name__ for entry in s.events()]
    assert kinds.count("NodeRegistered") == 3 and kinds[-1] == "Withdrawn"


@pytest.mark.anvil
@needs_anvil
def test_a_local_private_key_signs_its_own_transactions(rpc_chain):
    chain = rpc_chain
    s = Settlement.deploy(chain, min_stake=ETHER)
    signer = chain.new_account(5 * ETHER)
    assert chain.balance(signer) == 5 * ETHER
    mine = s.connect(signer)
    mine.register(b"\x33" * 32, Role.PROVIDER, stake=2 * ETHER)
    mine.add_stake(1)
    assert s.node(signer).stake == 2 * ETHER + 1
    with pytest.raises(ContractRevert) as refused:
        mine.register(b"\x33" * 32, Role.PROVIDER, stake=2 * ETHER)
    assert refused.value.name == "NodeAlreadyRegistered"
    mine.begin_unbonding()  # the nonce count survived the refused transaction
    assert s.node(signer).status == NodeStatus.UNBONDING


@pytest.mark.anvil
@needs_anvil
def test_anvil_state_file_keeps_the_chain_across_a_restart(tmp_path):
    state = tmp_path / "chain-state.json"
    with AnvilProcess(state_file=state) as first:
        chain = RpcChain(first.url)
        s = Settlement.deploy(chain, min_stake=ETHER)
        s.connect(chain.accounts[1]).register(b"\x44" * 32, Role.AUDITOR, stake=2 * ETHER)
        address = s.address
    assert state.is_file()
    with AnvilProcess(state_file=state) as second:
        again = Settlement(RpcChain(second.url), address)
        node = again.node(again.chain.accounts[1])
        assert (node.ed25519_key, node.stake, node.roles) == (b"\x44" * 32, 2 * ETHER, Role.AUDITOR)


def test_a_transaction_the_embedded_chain_refuses_is_a_chain_error():
    from contracts import ChainError

    chain = EmbeddedChain()
    pauper = "0x000000000000000000000000000000000000dEaD"  # holds no ether: it cannot pay the gas
    with pytest.raises(ChainError, match="transaction refused"):
        chain.transact(pauper, chain.accounts[0], b"", value=ETHER, gas=21_000)


def test_a_reply_with_neither_result_nor_error_is_a_chain_error():
    import http.server
    import threading

    from contracts import ChainError

    class NoResult(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # a JSON-RPC reply without "result"
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b'{"jsonrpc": "2.0", "id": 1}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NoResult)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ChainError, match="neither result nor error"):
            RpcChain(f"http://127.0.0.1:{server.server_address[1]}", timeout=10).rpc("eth_chainId")
    finally:
        server.shutdown()
        server.server_close()
