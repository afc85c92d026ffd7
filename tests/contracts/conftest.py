"""Fixtures of the settlement tests (defined in settlement_world.py, which the tests also import)."""

from .settlement_world import _stage, cast, world  # noqa: F401  (pytest fixtures)
from .settlement_world_v2 import _stage_v2, cast_v2, world_v2  # noqa: F401  (version 2's fixtures)
