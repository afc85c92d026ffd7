"""The roles on settlement version 2 (docs/roles-v2.md): a node whose ``settlement`` setting
is "2" runs these instead of version 1's (`node.roles.run_provider` and its siblings switch
here, `node.runtime` starts `keeper.run_keeper_v2`). Nothing of version 1 imports them.

  follower   the contract's events, in order, to the roles that subscribe (``ctx.follower``)
  trained    what this node computed for a job it holds a seat of (``ctx.trained``)
  data       a seat's items (bundle, checkpoints) served and fetched after its reveal only
  keeper     closeSeat, settle and withdraw for the jobs this node is party to

The role classes are imported when a node starts them; a role whose module is not built
yet says so in one line and idles, so the node still starts (and its follower, keeper and
data service run).
"""
from __future__ import annotations

import importlib
import logging
from typing import Any

import trio

log = logging.getLogger(__name__)

# role -> (module under node.roles.v2, class)
ROLE_CLASSES_V2 = {
    "provider": ("provider", "ProviderRoleV2"),
    "client": ("client", "ClientRoleV2"),
    "auditor": ("auditor_role", "AuditorRoleV2"),
}


class _NotBuilt:
    """Stands in for a version-2 role whose module does not exist yet: the node runs its
    shared context (follower, data service) and this role does nothing."""

    def __init__(self, ctx: Any, name: str) -> None:
        self.ctx = ctx
        self.name = name

    async def run(self) -> None:
        log.info("the %s role is not built for settlement 2 yet", self.name)
        await trio.sleep_forever()


def role_class_v2(name: str) -> Any:
    """The version-2 class of role ``name``, or None while its module is not built."""
    module_name, class_name = ROLE_CLASSES_V2[name]
    try:
        module = importlib.import_module(f"{__name__}.{module_name}")
    except ModuleNotFoundError as error:
        if error.name != f"{__name__}.{module_name}":
            raise  # the module exists and one of its imports is missing: a bug to see
        return None
    return getattr(module, class_name, None)


async def run_role_v2(node: Any, name: str) -> None:
    """Run role ``name`` of a settlement-2 node in the node's shared role context."""
    from ..context import run_role

    cls = role_class_v2(name)
    await run_role(node, cls if cls is not None else (lambda ctx: _NotBuilt(ctx, name)))


__all__ = ["ROLE_CLASSES_V2", "role_class_v2", "run_role_v2"]
