import pytest

from .protocol_world import register_test_ops


@pytest.fixture(autouse=True)
def synthetic_operators(library_registry):
    """The protocol tests' synthetic operators, in this test's copy of the registry."""
    register_test_ops()
