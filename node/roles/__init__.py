"""The roles a node plays: provider, auditor, client (any combination).

``install_roles`` puts one runner per role into `node.runtime.ROLE_RUNNERS` (keeping any
runner already there). A node's roles share one `context.RoleContext`: its identity,
its binding to the settlement contract, the job and dispute stream protocols and the
gossip subscriptions. The modules:

  context        the shared per-node state and the two stream protocols' dispatch
  job_protocols  stream protocol ids, gossip topics and their messages
  chain          which chain, which contract, which account (and funding on dev chains)
  jobfiles       the job bundle (spec and data as blobs), job directories, the terms check
  runner         a training run on disk (resumable, or deviating with ``--cheat``) and its oracle
  disputes       the dispute machines' trio shell: the referee drives, parties answer, logs resume
  referee        refereeing a job's disputes: checked on chain, run to a verdict, recorded with rule
  client_job     a client's job apart from the network: its life as one table, its phase, its size
  client_result  what a client keeps as a job's result: only what checks against the chain's roots
  keeper         every node's loop that settles jobs it knows of once their deadlines passed
  provider, auditor, client   the roles
  v2             the roles on settlement version 2 (a node with ``settlement = "2"`` runs them)
"""
from __future__ import annotations

from typing import Any, MutableMapping


def _settlement_2(node: Any) -> bool:
    return getattr(node.config, "settlement", "1") == "2"


async def run_provider(node: Any) -> None:
    if _settlement_2(node):
        from .v2 import run_role_v2

        return await run_role_v2(node, "provider")
    from .context import run_role
    from .provider import ProviderRole

    await run_role(node, ProviderRole)


async def run_auditor(node: Any) -> None:
    if _settlement_2(node):
        from .v2 import run_role_v2

        return await run_role_v2(node, "auditor")
    from .auditor import AuditorRole
    from .context import run_role

    await run_role(node, AuditorRole)


async def run_client(node: Any) -> None:
    if _settlement_2(node):
        from .v2 import run_role_v2

        return await run_role_v2(node, "client")
    from .client import ClientRole
    from .context import run_role

    await run_role(node, ClientRole)


def install_roles(runners: MutableMapping[str, Any]) -> None:
    """Register the role runners, leaving any already registered (a test's stand-in) in place."""
    runners.setdefault("provider", run_provider)
    runners.setdefault("auditor", run_auditor)
    runners.setdefault("client", run_client)
