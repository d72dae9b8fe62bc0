"""The engines a runner builds: fenced for a claimed launch, bare for endings.

A fenced engine writes a claimed run's bundle behind its `LeaseFence`; when the
bundles live in the store's database its first write and its seal commit in the
launch's own transitions (`RunLink`, activator.py). A bare engine only records endings:
no claim, so unfenced (a folder's lock or the launch's own state decides who may
write).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from runner._leases import renew_every
from runner.clock import Clock
from runner.engine import Engine, NotificationSink
from runner.engine._items import ChildRuns
from runner.engine._processes import ProcessRegistry
from runner.engine._rows import BundleRows
from runner.engine._runtypes import LaunchLink, Observer
from runner.engine._secrets import NO_SOURCE, SecretSource
from runner.store import LaunchBook, LaunchRecord, LeaseFence, Store

from ._channels import ChannelSink
from ._handback import HandBack
from ._held import HeldInput
from ._items import StoreItems
from ._stepcache import StoreStepCache

if TYPE_CHECKING:
    from runner.engine import AgentStepExecutor


@dataclass
class EngineOptions:
    # A run's agent executor: `executor(record)` when set (a session's, made per
    # launch), else `agent` (the runner's own, `--agent`). With `hand_back`, a session's
    # launch run here gives its agent steps back to the session instead (handback.py).
    executor: Callable[[LaunchRecord], AgentStepExecutor | None] | None = None
    agent: AgentStepExecutor | None = None
    hand_back: bool = False
    notifications: NotificationSink | None = None
    observer: Observer | None = None
    durability: str = "full"
    project_root: Path | None = None
    processes: ProcessRegistry | None = None
    crash_point: Callable[[str], None] | None = None  # the engine's crash seam (tests)
    # Secrets and env values (`--secret`, the environment), resolved at each activation.
    secret_source: SecretSource = NO_SOURCE
    # `--no-cache`: nodes with `cache:` run and their results are kept, none is reused.
    use_cache: bool = True
    # A host's runs park while hosts run their shared fan-out items (ADR 0008 phase 2);
    # a foreground `wfrun run` runs them itself.
    items_on_hosts: bool = False


class Engines:
    """Builds a runner's engines over its runs folder (or database bundles)."""

    def __init__(self, store: Store, book: LaunchBook, runs_dir: Path, clock: Clock,
                 held: HeldInput, options: EngineOptions, *, rows: BundleRows | None,
                 lease_seconds: float) -> None:
        self._store = store
        self._book = book  # a session's launch handed back (handback.py)
        self.runs_dir = runs_dir
        self._clock = clock
        self._held = held
        self.options = options  # read at each build: a caller may change it before a run
        # Bundles in the store's database (Postgres): any host can resume any run.
        self.rows = rows
        self._patience = renew_every(lease_seconds)
        # Where the fenced engines keep their bundles: chosen once, not per launch.
        self._space = Engine(runs_dir=runs_dir, clock=clock, rows=rows,
                             patience=self._patience).space
        self._lease_seconds = lease_seconds
        # Runs `workflow:` bodies of fan-out nodes as linked child runs (set by the
        # coordinator, which is what runs them: items.LaunchChildren).
        self.children: ChildRuns | None = None
        # Neither holds anything of a run: one each for every run (the sink again when
        # a caller swaps `options.notifications`).
        self._step_cache = StoreStepCache(store)
        self._sink = ChannelSink(store, options.notifications)

    def fenced(self, record: LaunchRecord, fence: LeaseFence, *,
               link: LaunchLink | None = None) -> Engine:
        """An engine for the claimed launch `record`, its writes behind `fence`;
        `link` joins its database bundle's writes to the launch's transitions."""
        opts = self.options
        executor: AgentStepExecutor | None = opts.agent
        if opts.hand_back and record.origin_session_id is not None:
            executor = HandBack(self._book, record.run_id)
        elif opts.executor is not None:
            executor = opts.executor(record)
        if self._sink.inner is not opts.notifications:
            self._sink = ChannelSink(self._store, opts.notifications)
        # The runner's secrets, with the writeOnly values held for this run (held.py).
        source = self.secret_source(record.run_id) if record.run_id in self._held.values \
            else opts.secret_source
        return Engine(runs_dir=self.runs_dir, clock=self._clock,
                      executor=executor,
                      notifications=self._sink,
                      observer=opts.observer, durability=opts.durability,
                      project_root=opts.project_root, work_dir=opts.project_root,
                      fence=fence, processes=opts.processes, crash_point=opts.crash_point,
                      secret_source=source,
                      rows=self.rows, claim=fence.token, patience=self._patience,
                      bundle_space=self._space,
                      step_cache=self._step_cache, use_cache=opts.use_cache,
                      launch=link,
                      # Made only when a fan-out node asks for it.
                      items=partial(StoreItems, self._store.fanout, record.run_id,
                                    fence.token, lease_seconds=self._lease_seconds,
                                    hosted=opts.items_on_hosts),
                      children=self.children,
                      # Only a take-over (the claim found the row `running`: its runner
                      # died mid-node). A park stopped its node itself; that resumes as before.
                      effects_guarded=lambda: record.status == "running"
                      and self._controller_child(record.run_id))

    def secret_source(self, run_id: str) -> SecretSource:
        """The secret source of `run_id`'s run: the runner's (`options`), with the
        writeOnly values held for it (held.py)."""
        base = self.options.secret_source
        kept = self._held.values.get(run_id)
        if not kept:  # most runs: no writeOnly input
            return base
        held = {k: v for k, v in kept.items() if isinstance(v, str)}
        return SecretSource(given={**base.given, **held}, environ=base.environ) if held \
            else base

    def reading(self, run_id: str) -> Engine:
        """An engine that reads run `run_id` to run items of its shared fan-out nodes on
        this host (engine/_itemhost.py): no claim, it never writes the run's bundle."""
        opts = self.options
        return Engine(runs_dir=self.runs_dir, clock=self._clock, rows=self.rows,
                      project_root=opts.project_root, work_dir=opts.project_root,
                      processes=opts.processes, secret_source=self.secret_source(run_id),
                      patience=self._patience)

    def bare(self) -> Engine:
        """An engine that only records endings (no claim: unfenced, as a folder's lock
        or the launch's own state decides who may write)."""
        return Engine(runs_dir=self.runs_dir, clock=self._clock, rows=self.rows)

    def _controller_child(self, run_id: str) -> bool:
        """Whether `run_id` is the current attempt of a controller's child request (its
        action nodes are effects of that controller's operation, seed 004). Both stores
        hold the controller tables; a store without them has no children."""
        requests = getattr(self._store, "workflow_requests", None)
        return requests is not None and requests.find_by_run(run_id) is not None
