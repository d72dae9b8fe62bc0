"""`build_coordinator(workspace, store, role)`: the one way a runner is built.

Every runner of launches (a foreground `wfrun run`, a command that resumes or
cancels, controller children, an agent session, the `wfrun host` daemon) is a
`LaunchCoordinator` over the workspace's runs and one store. What differs by role
is written once, in `ROLES`:

    role         shell groups   crash seam   run secrets from   a session's launch
    foreground   registered     yes          --secret + env     -
    detached     -              -            env                handed back
    child        registered     yes          env                -
    session      registered     yes          (the session's)    -
    host         its registry   yes          env                handed back
    plain        -              -            -                  -

"registered": shell process groups are recorded in this process's registry, so
whoever takes a run over from a dead process can reap them. "crash seam": the
`WFRUN_CRASH_AT` test seam reaches the launch and the engine. "handed back": a
session's launch run here gives its agent steps back to the session, and its
ending is always told to the session (`handback.py`). Every role but `plain`
redacts this process's secret-named environment values. `plain` takes nothing
from the process: tests and benches start from it (`runner.testing`).

Keyword arguments override one thing for one runner (a test's clock, a host's
lease); they never change what a role means.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from runner import _leases as leases
from runner._leases import LEASE_SECONDS
from runner.clock import Clock
from runner.engine._processes import ProcessRegistry, registry_for_this_process
from runner.engine._rows import BundleRows
from runner.engine._runtypes import Observer
from runner.engine._secrets import NO_SOURCE, SecretSource
from runner.launch import EngineOptions, LaunchCoordinator, Resolver
from runner.store import Store

from ._identity import environment_secrets, runner_id
from ._local import Workspace

if TYPE_CHECKING:
    from runner.engine import AgentStepExecutor

Role = Literal["foreground", "detached", "child", "session", "host", "plain"]


@dataclass(frozen=True)
class RoleTraits:
    """What a role takes from this process (see the module's table)."""

    processes: bool  # record shell process groups in this process's registry
    crash_seam: bool  # the workspace's WFRUN_CRASH_AT seam reaches launch and engine
    environ: bool  # run secrets resolve from this process's environment
    hands_back: bool  # a session's launch: agent steps go back, the session is told
    env_secrets: bool = True  # redact this process's secret-named environment values


ROLES: dict[Role, RoleTraits] = {
    "foreground": RoleTraits(processes=True, crash_seam=True, environ=True, hands_back=False),
    "detached": RoleTraits(processes=False, crash_seam=False, environ=True, hands_back=True),
    "child": RoleTraits(processes=True, crash_seam=True, environ=True, hands_back=False),
    "session": RoleTraits(processes=True, crash_seam=True, environ=False, hands_back=False),
    "host": RoleTraits(processes=True, crash_seam=True, environ=True, hands_back=True),
    "plain": RoleTraits(processes=False, crash_seam=False, environ=False, hands_back=False,
                        env_secrets=False),
}


def build_coordinator(ws: Workspace, store: Store, role: Role, *,
                      executor: AgentStepExecutor | None = None,
                      observer: Observer | None = None, durability: str = "full",
                      given: Mapping[str, str] | None = None,
                      processes: ProcessRegistry | None = None,
                      options: EngineOptions | None = None,
                      resolver: Resolver | None = None,
                      runner: str | None = None, clock: Clock | None = None,
                      lease_seconds: float = LEASE_SECONDS,
                      renew_every: float | None = None,
                      secrets: tuple[str, ...] | None = None,
                      crash: Callable[[str], None] | None = None,
                      rows: BundleRows | Literal["store"] | None = "store",
                      scrub_input: bool = True) -> LaunchCoordinator:
    """The runner of `role` over `ws`'s runs and `store` (see the module).

    `executor`: the agent executor (a session's is wired after). `given`: `--secret`
    values. `processes`: the registry of shell groups (default this process's, when the
    role registers them). `options` replaces the engine options the role would build.
    `rows`: where bundles live (default: the store's database if it holds them)."""
    traits = ROLES[role]
    seam = ws.crash_point if traits.crash_seam else None
    if options is None:
        if traits.environ:
            source = SecretSource(given=dict(given or {}), environ=dict(os.environ))
        else:
            source = SecretSource(given=dict(given)) if given else NO_SOURCE
        if processes is None and traits.processes:
            processes = registry_for_this_process(ws.children_dir)
        options = EngineOptions(
            agent=executor, hand_back=traits.hands_back, observer=observer,
            durability=durability, project_root=ws.project_root, processes=processes,
            crash_point=seam, secret_source=source)
    if secrets is None:
        secrets = environment_secrets() if traits.env_secrets else ()
    return LaunchCoordinator(
        store, resolver or ws.workflows, ws.runs_dir, runner_id=runner or runner_id(),
        clock=clock or ws.clock, options=options, lease_seconds=lease_seconds,
        renew_every=leases.renew_every(lease_seconds) if renew_every is None
        else renew_every,
        secrets=secrets, crash=crash or seam,
        rows=ws.bundle_rows(store) if isinstance(rows, str) else rows,
        scrub_input=scrub_input, for_sessions=traits.hands_back)
