import pytest

from repops_cupy import ops, registry  # noqa: F401 - ops fills the registry
from repops_cupy._backend import gpu_available

# The library's operators, as registered on import; tests that register synthetic
# operators (the protocol's) get them only for their own duration.
LIBRARY_OPS = dict(registry._OPS)


@pytest.fixture(autouse=True)
def library_registry(monkeypatch):
    monkeypatch.setattr(registry, "_OPS", dict(LIBRARY_OPS))


# Modules whose tests run whole networks against real-time windows (node processes, or the in-process
# v2 testnet): under xdist they run one after another on one worker. Two at once starve each other on
# two cores (a chaos run beside a v2 testnet of processes took 390 s instead of 134).
ONE_WORKER_MODULES = frozenset(f"tests/node/{name}.py" for name in (
    "test_readme_local_network", "test_testnet_chaos_run", "test_testnet_v2_processes", "test_reconcile_processes",
    "test_keeper_processes", "test_e2e_network", "test_e2e_restart", "test_job_faults_processes",
    "test_job_faults_chain", "test_testnet_v2"))


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: xdist may be absent or off (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """`-n`'s default scheduling, one test at a time in collection order (slow tests first), except
    that ONE_WORKER_MODULES are one unit of work, handed out first."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneTestAtATime(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "one-worker-modules" if nodeid.split("::")[0] in ONE_WORKER_MODULES else nodeid

    return OneTestAtATime(config, log)


@pytest.hookimpl(trylast=True)  # after pytest has grouped the items by their fixtures
def pytest_collection_modifyitems(config, items):
    # The slow tests first (in their order): workers then take the long ones while much is left, and
    # the run ends on short tests instead of one worker finishing a long test while the others idle.
    items.sort(key=lambda item: "slow" not in item.keywords)
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU with CuPy on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
