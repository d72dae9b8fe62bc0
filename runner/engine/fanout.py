"""`parallel` and `map` nodes (DESIGN §10, ADR 0008): many bodies at once, each one
durable on its own.

The node's items live in an `ItemLedger` (the store's `fanout_items` through the
launch layer; `MemoryLedger` for an engine without a store). Entering the node
opens its rows (idempotent: a resumed run finds the items that ended and runs only
the others), claims up to `max_concurrency` at a time (the ledger keeps the
ceiling), runs each claimed body on its own thread through the per-kind code every
node uses (`nodes.execute`), and settles it. A pure body (a compute expression) is
evaluated here on the run's thread and settled in batches, with no claim.

Each body runs under its own `RunControl`, which follows the run's (cancel, park)
and which `fail_fast` cancels alone. Item logs are recorded under `NODE[i]` (a
parallel branch: `NODE[name]`), so `wfrun logs RUN NODE[3]` finds them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

from runner.backoff import ENGINE_JITTER, backoff_delay
from runner.compiler import Node
from runner.compiler.budget import Scope
from runner.compiler.budget import scoped as scoped_budget
from runner.compiler.model import ChildWorkflowBody, MapSpec, ParallelSpec
from runner.compiler.templates import TemplateError, TemplateStopped, render_native
from runner.errors import ClaimLost

from .control import RunControl
from .nodes import NodeResult, Outcome, execute, new_attempt_id, pure

if TYPE_CHECKING:
    from .runner import RunDriver

#: Pure items settled per ledger write.
PURE_BATCH = 500
_POLL = 0.05  # seconds between looks at the run's control while items run


@dataclass(frozen=True)
class ItemEnd:
    index: int
    outcome: str  # ok | failed | timed_out | cancelled
    output: Any = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class ItemRecord:
    index: int
    state: str  # pending | running | ok | failed | timed_out | cancelled
    starts: int
    output: Any = None
    error: dict[str, Any] | None = None


class ItemLedger(Protocol):
    """Where a fan-out node's items are durable. Every call raises `ClaimLost` when the
    caller no longer holds the run."""

    def open(self, node: str, visit: int, count: int) -> None: ...

    def claim(self, node: str, visit: int, limit: int) -> tuple[list[tuple[int, int]],
                                                                list[int]]:
        """(the items claimed as (index, start number), the items ended `interrupted`)."""
        ...

    def settle(self, node: str, visit: int, ends: Sequence[ItemEnd], *,
               claimed: bool = True) -> int:
        """Record endings; returns how many items of the visit are still open."""
        ...

    def cancel_open(self, node: str, visit: int, error: dict[str, Any]) -> int: ...

    def items(self, node: str, visit: int) -> list[ItemRecord]: ...


class MemoryLedger:
    """An `ItemLedger` in memory: an engine run without a store (nothing survives the
    process, as nothing of such a run's launch does)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def open(self, node: str, visit: int, count: int) -> None:
        with self._lock:
            self._rows.setdefault((node, visit), [
                {"state": "pending", "starts": 0, "output": None, "error": None}
                for _ in range(count)])

    def claim(self, node: str, visit: int, limit: int) -> tuple[list[tuple[int, int]],
                                                                list[int]]:
        with self._lock:
            rows = self._rows[(node, visit)]
            free = limit - sum(r["state"] == "running" for r in rows)
            got: list[tuple[int, int]] = []
            for i, r in enumerate(rows):
                if len(got) >= free:
                    break
                if r["state"] == "pending":
                    r["state"], r["starts"] = "running", r["starts"] + 1
                    got.append((i, r["starts"]))
            return got, []

    def settle(self, node: str, visit: int, ends: Sequence[ItemEnd], *,
               claimed: bool = True) -> int:
        with self._lock:
            rows = self._rows[(node, visit)]
            for end in ends:
                r = rows[end.index]
                if r["state"] == ("running" if claimed else "pending"):
                    r.update(state=end.outcome, output=end.output, error=end.error)
                    r["starts"] += 0 if claimed else 1
            return sum(r["state"] in ("pending", "running") for r in rows)

    def cancel_open(self, node: str, visit: int, error: dict[str, Any]) -> int:
        with self._lock:
            n = 0
            for r in self._rows.get((node, visit), []):
                if r["state"] in ("pending", "running"):
                    r.update(state="cancelled", error=error)
                    n += 1
            return n

    def items(self, node: str, visit: int) -> list[ItemRecord]:
        with self._lock:
            return [ItemRecord(i, r["state"], r["starts"], r["output"], r["error"])
                    for i, r in enumerate(self._rows.get((node, visit), []))]


@dataclass(frozen=True)
class _Plan:
    """What a fan-out node runs: a body and a name per item, and its rules."""

    bodies: list[Node | ChildWorkflowBody]
    labels: list[str]  # item index or branch name, for NODE[label]
    values: list[Any]  # the map's items (None per branch)
    limit: int
    fail_fast: bool
    as_name: str | None


def _plan(driver: RunDriver, node: Node, ctx: dict[str, Any]) -> _Plan | NodeResult:
    spec = node.spec
    if isinstance(spec, ParallelSpec):
        names = [name for name, _ in spec.branches]
        return _Plan([b for _, b in spec.branches], names, [None] * len(names),
                     spec.max_concurrency or max(len(names), 1), spec.fail_fast, None)
    assert isinstance(spec, MapSpec)
    where = f"nodes.{node.local_id or node.id}.map.over"
    try:
        values = render_native(spec.over, ctx)
    except TemplateStopped:
        raise
    except TemplateError as exc:
        return _failed("template_error", f"{where}: {exc}")
    if not isinstance(values, list):
        return _failed("bad_over", f"{where} must yield a list, not "
                       f"{type(values).__name__}")
    if len(values) > spec.max_items:
        return _failed("too_many_items", f"{where} yielded {len(values)} items, over the "
                       f"limit of {spec.max_items}; raise it with `max_items:` or split the "
                       "list")
    return _Plan([spec.body] * len(values), [str(i) for i in range(len(values))], values,
                 spec.max_concurrency, spec.fail_fast, spec.as_name)


def _failed(code: str, message: str) -> NodeResult:
    return NodeResult("failed", error={"code": code, "message": message[:2000]})


def steps_needed(driver: RunDriver, node: Node, count: int) -> str | None:
    """`max_steps` counts each item execution: why `count` more do not fit, or None."""
    limit = driver.definition.max_steps
    if driver.state.steps + count > limit:
        return (f"node '{node.id}' would run {count} items past the run's max_steps ({limit}, "
                f"{driver.state.steps} used); raise max_steps")
    return None


def run_fanout(driver: RunDriver, node: Node, deadline: float | None,
               ctx: dict[str, Any]) -> NodeResult:
    plan = _plan(driver, node, ctx)
    if isinstance(plan, NodeResult):
        return plan
    n = len(plan.bodies)
    resumed = driver.resuming_node == node.id
    over = None if resumed else steps_needed(driver, node, n)
    if over is not None:
        return NodeResult("failed", error={"code": "max_steps", "message": over})
    ledger = driver.items
    visit = driver.state.visits.get(node.id, 1)
    ledger.open(node.id, visit, n)
    run = _Fanout(driver, node, plan, visit, deadline, ctx)
    stopped = run.drive()
    if stopped is not None:
        return stopped
    return run.result(n)


class _Fanout:
    def __init__(self, driver: RunDriver, node: Node, plan: _Plan, visit: int,
                 deadline: float | None, ctx: dict[str, Any]) -> None:
        self.driver, self.node, self.plan, self.visit = driver, node, plan, visit
        self.deadline, self.ctx = deadline, ctx
        self.ledger = driver.items
        self.done: queue.Queue[tuple[int, ItemEnd | BaseException | None]] = queue.Queue()
        self.controls: dict[int, RunControl] = {}
        self.threads: dict[int, threading.Thread] = {}
        self.emit_lock = threading.Lock()
        self.lost: BaseException | None = None

    # -- the loop ---------------------------------------------------------------------
    def drive(self) -> NodeResult | None:
        records = self.ledger.items(self.node.id, self.visit)
        open_ = [r.index for r in records if r.state in ("pending", "running")]
        if not open_:
            return None
        if self._all_pure():
            return self._pure(open_)
        failed = any(r.state in ("failed", "timed_out") for r in records)
        if failed and self.plan.fail_fast:
            self._cancel_open("fail_fast: an earlier item failed")
            return None
        control = self.driver.control
        while True:
            if control.stopping:
                return self._stop()
            if self.lost is None and not failed:
                self._start_claimed()
            if not self.threads:
                if failed or self.lost is not None:
                    break
                if not self._open_left():
                    break
            try:
                index, end = self.done.get(timeout=_POLL)
            except queue.Empty:
                continue
            self.threads.pop(index, None)
            self.controls.pop(index, None)
            if isinstance(end, BaseException):
                self.lost = self.lost or end
                self._stop_all("park", "lost the run's claim", clean=False)
                continue
            if end is None:
                continue  # parked: left running for the next holder
            if end.outcome in ("failed", "timed_out") and self.plan.fail_fast and not failed:
                failed = True
                self._stop_all("cancel", f"fail_fast: item {self.plan.labels[end.index]} "
                               f"{end.outcome}")
        if self.lost is not None:
            raise self.lost
        if failed and self.plan.fail_fast:
            self._cancel_open("fail_fast: another item failed")
        return None

    def _open_left(self) -> bool:
        return any(r.state in ("pending", "running")
                   for r in self.ledger.items(self.node.id, self.visit))

    def _start_claimed(self) -> None:
        claimed, interrupted = self.ledger.claim(self.node.id, self.visit, self.plan.limit)
        del interrupted  # ended `failed` by the ledger; the result reads them back
        for index, start in claimed:
            control = RunControl()
            thread = threading.Thread(target=self._item, args=(index, start, control),
                                      daemon=True,
                                      name=f"wfrun-item-{self.node.id}[{index}]")
            self.controls[index] = control
            self.threads[index] = thread
            thread.start()

    def _stop_all(self, how: str, reason: str, *, clean: bool = True) -> None:
        for control in list(self.controls.values()):
            if how == "park":
                control.park(reason, clean=clean)
            else:
                control.cancel(reason)

    def _stop(self) -> NodeResult:
        parent = self.driver.control
        if parent.stop_reason == "park":
            self._stop_all("park", parent.reason or "parked", clean=parent.clean)
        else:
            self._stop_all("cancel", parent.reason or "cancelled")
        self._join()
        if parent.stop_reason == "park":
            return NodeResult("parked")
        self._cancel_open(parent.reason or "cancelled")
        return NodeResult("cancelled", error={"code": "cancelled",
                                              "message": parent.reason or "cancelled"})

    def _join(self) -> None:
        while self.threads:
            index, end = self.done.get()
            self.threads.pop(index, None)
            self.controls.pop(index, None)
            if isinstance(end, BaseException):
                self.lost = self.lost or end

    def _cancel_open(self, reason: str) -> None:
        self.ledger.cancel_open(self.node.id, self.visit,
                                {"code": "cancelled", "message": reason})

    # -- pure bodies --------------------------------------------------------------------
    def _all_pure(self) -> bool:
        return all(isinstance(b, Node) and pure(b) for b in self.plan.bodies)

    def _pure(self, open_: list[int]) -> NodeResult | None:
        batch: list[ItemEnd] = []
        for index in open_:
            if self.driver.control.stopping:
                break
            body = self.plan.bodies[index]
            assert isinstance(body, Node)
            result = execute(self.driver, self._item_node(body, index), "", self.deadline,
                             self._item_ctx(index))
            if result.outcome == "parked" or (result.outcome == "cancelled"
                                              and self.driver.control.stopping):
                break
            masked = self._masked(ItemEnd(index, result.outcome, result.output, result.error))
            assert masked is not None
            batch.append(masked)
            if len(batch) >= PURE_BATCH:
                self.ledger.settle(self.node.id, self.visit, batch, claimed=False)
                batch = []
            if result.outcome != "ok" and self.plan.fail_fast:
                break
        if batch:
            self.ledger.settle(self.node.id, self.visit, batch, claimed=False)
        if self.driver.control.stopping:
            return self._stop()
        if self.plan.fail_fast and self._open_left():
            self._cancel_open("fail_fast: another item failed")
        return None

    def _masked(self, end: ItemEnd | None) -> ItemEnd | None:
        """A secret's value never reaches the store (as `RunDriver.emit` masks events)."""
        if end is None:
            return None
        mask = self.driver.secrets.mask_json
        return replace(end, output=mask(end.output), error=mask(end.error))

    # -- one item -------------------------------------------------------------------------
    def _item_node(self, body: Node, index: int) -> Node:
        return replace(body, id=f"{self.node.id}[{self.plan.labels[index]}]",
                       scope=self.node.scope)

    def _item_ctx(self, index: int) -> dict[str, Any]:
        ctx = dict(self.ctx)
        if self.plan.as_name is not None:
            ctx[self.plan.as_name] = self.plan.values[index]
            ctx["index"] = index
        return ctx

    def _item(self, index: int, start: int, control: RunControl) -> None:
        end: ItemEnd | BaseException | None
        try:
            end = self._masked(self._run_item(index, control))
            if end is not None:
                self.ledger.settle(self.node.id, self.visit, [end])
        except ClaimLost as exc:
            end = exc
        except Exception as exc:  # a bug in one item ends that item, never the run loop
            end = ItemEnd(index, "failed", error={"code": "internal_error",
                                                  "message": type(exc).__name__})
            try:
                self.ledger.settle(self.node.id, self.visit, [end])
            except ClaimLost as lost:
                end = lost
        self.done.put((index, end))

    def _run_item(self, index: int, control: RunControl) -> ItemEnd | None:
        body = self.plan.bodies[index]
        if isinstance(body, ChildWorkflowBody):
            return ItemEnd(index, "failed", error={
                "code": "unsupported", "message": "workflow: bodies are not run yet"})
        item = self._item_node(body, index)
        # The per-kind code reads the driver's attributes only: the view stands in for it.
        view = cast("RunDriver", ItemDriver(self.driver, control, self.emit_lock))
        attempts = max(body.retry.attempts, 1)
        result = NodeResult("failed")
        for k in range(attempts):
            clock = self.driver.clock
            own = clock.monotonic() + body.timeout if body.timeout is not None else None
            deadline = min(d for d in (own, self.deadline) if d is not None) \
                if own is not None or self.deadline is not None else None
            scope = Scope(self.driver.definition.template_budget, clock.monotonic, deadline,
                          lambda: control.stopping)
            with scoped_budget(scope):
                result = execute(view, item, new_attempt_id(), deadline, self._item_ctx(index))
            if result.outcome == "parked":
                return None
            if result.outcome not in ("failed", "timed_out") or k + 1 >= attempts:
                break
            delay = backoff_delay(k + 1, body.retry.backoff, body.retry.max_delay,
                                  jitter=ENGINE_JITTER,
                                  seed=f"{self.driver.run_id}|{item.id}|{k + 1}")
            if clock.sleep(delay, control.wake) or control.stopping:
                if control.stop_reason == "park":
                    return None
                break
        if result.outcome == "cancelled" and control.stop_reason == "park":
            return None
        return ItemEnd(index, result.outcome, result.output, result.error)

    # -- the node's result ------------------------------------------------------------------
    def result(self, n: int) -> NodeResult:
        records = self.ledger.items(self.node.id, self.visit)
        driver = self.driver
        summary = [{"outcome": r.state, "error": r.error, "starts": r.starts}
                   for r in records]
        outputs = [driver.live(r.output) if r.state == "ok" else None for r in records]
        if isinstance(self.node.spec, ParallelSpec):
            output: Any = dict(zip(self.plan.labels, outputs, strict=True))
            extra: dict[str, Any] = {"branches": dict(zip(self.plan.labels, summary,
                                                          strict=True))}
        else:
            output = outputs
            extra = {"items": summary}
        extra["item_steps"] = sum(r.starts for r in records)
        bad = [r for r in records if r.state != "ok"]
        if not bad:
            return NodeResult("ok", output, extra=extra)
        extra["output"] = output  # kept on a failure too: the items that ended ok
        first = next((r for r in bad if r.state != "cancelled"), bad[0])
        outcome: Outcome = "failed" if first.state != "cancelled" else "cancelled"
        label = self.plan.labels[first.index]
        message = (first.error or {}).get("message") or first.state
        error = {"code": "items_failed" if outcome == "failed" else "cancelled",
                 "message": f"{len(bad)} of {n} items did not end ok; "
                            f"{self.node.id}[{label}]: {message}"[:2000],
                 "item": label}
        return NodeResult(outcome, output, error=error, extra=extra)


class ItemDriver:
    """What one item's body sees of the run: the driver, with the item's own control and
    its recording serialized with the other items' (the trace has one writer)."""

    def __init__(self, driver: RunDriver, control: RunControl, lock: threading.Lock) -> None:
        self._driver = driver
        self.control = control
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)

    def record_log(self, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            self._driver.record_log(*args, **kwargs)

    def prompt_sent(self, *args: Any) -> None:
        with self._lock:
            self._driver.prompt_sent(*args)

    def publish_update(self, kind: str, key: str, data: Any) -> None:
        with self._lock:
            self._driver.publish_update(kind, key, data)

    def notify(self, *args: Any) -> None:
        with self._lock:
            self._driver.notify(*args)
