import pytest

from repops_cupy import ops, registry  # noqa: F401 - ops fills the registry
from repops_cupy._backend import gpu_available

# The library's operators, as registered on import; tests that register synthetic
# operators (the protocol's) get them only for their own duration.
LIBRARY_OPS = dict(registry._OPS)


@pytest.fixture(autouse=True)
def library_registry(monkeypatch):
    monkeypatch.setattr(registry, "_OPS", dict(LIBRARY_OPS))


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU with CuPy on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
