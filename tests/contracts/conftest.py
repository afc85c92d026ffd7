"""Fixtures of the settlement tests (defined in settlement_world.py, which the tests also import)."""

from .settlement_world import _stage, cast, world  # noqa: F401  (pytest fixtures)
