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

import hashlib
import queue
import threading
from dataclasses import replace
from typing import Any

from runner._backoff import ENGINE_JITTER, backoff_delay
from runner.compiler import Node
from runner.compiler._fanout import ChildWorkflowBody, ParallelSpec
from runner.compiler._templates import TemplateError, render_native

from ._control import ITEMS, RunControl
from ._fanplan import SHARED_PLANS, _failed, _Plan, _plan
from ._items import ITEM_ENDS, ItemEnd, ItemRecord
from ._nodecontext import FanoutPort, NodeContext, NodeResult, Outcome
from ._nodes import execute, new_attempt_id

#: Pure items settled per ledger write.
PURE_BATCH = 500
_POLL = 0.05  # seconds between looks at the run's control while items run
IDLE_POLLS = 5  # polls between claims that settle nothing (a shared node's other hosts)
#: A parent resumed while hosts run its visit's last items waits for them (`_await`):
#: a look at their rows this often at least (an item ended in this process wakes it at
#: once), and back to parking when none ended for HOSTS_STALL seconds.
HOSTS_LOOK = 0.1
HOSTS_STALL = 5.0
_OPEN = ("pending", "running")


def run_fanout(ctx: NodeContext, port: FanoutPort) -> NodeResult:
    """One attempt of a `parallel` or `map` node (nodes.py hands it here, with the port
    the run loop made for it)."""
    kept = SHARED_PLANS.get(ctx.run_id, ctx.node, ctx.visit)
    plan = kept if kept is not None else _plan(ctx.node, ctx.values)
    if isinstance(plan, NodeResult):
        return plan
    n = len(plan.bodies)
    reused = port.reused(ctx.node.id, ctx.visit)
    labels = set(plan.labels)
    if reused is not None:  # a rerun: the items that ended ok before do not run again
        reused = (reused[0], {k: v for k, v in reused[1].items() if k in labels})
    runs = n - (len(reused[1]) if reused is not None else 0)
    # `max_steps` counts each item: a node that cannot run them all does not start any.
    left = port.steps_left()
    if not ctx.resuming and runs > left:
        return _failed("max_steps", f"node '{ctx.node.id}' would run {runs} items with "
                       f"{left} of the run's max_steps left; raise max_steps")
    shared = shareable(ctx, plan)
    if shared and kept is None:
        SHARED_PLANS.put(ctx.run_id, ctx.node, ctx.visit, plan)
    if reused is not None:
        # A rerun's reused items are written ended before the node is shared (opening
        # is idempotent): no host can claim one while it is still pending.
        port.items.open(ctx.node.id, ctx.visit, n)
        _seed(port, ctx, plan, reused[1])
    port.items.open(ctx.node.id, ctx.visit, n, share=plan.limit if shared else None,
                    fail_fast=plan.fail_fast)
    port.crash("after_items_opened")
    run = _Fanout(ctx, port, plan, shared, reused)
    try:
        stopped = run.drive()
    except BaseException:
        # A lost claim, or the run's thread dying (interpreter exit, a simulated crash):
        # no item runs on without its run. Their rows stay for the next holder.
        run.abandon()
        raise
    if stopped is not None:
        return stopped
    return run.result(n)


def _seed(port: FanoutPort, ctx: NodeContext, plan: _Plan, reused: dict[str, Any]) -> None:
    """Write a rerun's reused items ended ok before any item is claimed (a crash before
    this leaves them pending, and the resume seeds them again: only pending rows are)."""
    ends = [ItemEnd(r.index, "ok", reused[plan.labels[r.index]])
            for r in port.items.items(ctx.node.id, ctx.visit)
            if r.state == "pending" and plan.labels[r.index] in reused]
    for i in range(0, len(ends), PURE_BATCH):
        port.items.settle(ctx.node.id, ctx.visit, ends[i:i + PURE_BATCH], claimed=False)


def shareable(ctx: NodeContext, plan: _Plan) -> bool:
    """Whether any host may run the node's items (ADR 0008 phase 2): shell bodies of a
    run no session owns. A session's agent items keep its one-at-a-time turns on the
    parent's host; hooks, agents and `workflow:` bodies run there too."""
    if ctx.executor is not None and ctx.executor.name == "session":
        return False
    return all(isinstance(b, Node) and b.kind == "action"
               and getattr(b.spec, "call", None) is None for b in plan.bodies)


def item_values(values: dict[str, Any], plan: _Plan, index: int) -> dict[str, Any]:
    """The template values of item `index`: the node's, with the item under `as`."""
    out = dict(values)
    if plan.as_name is not None:
        out[plan.as_name] = plan.values[index]
        out["index"] = index
    return out


def item_node(node: Node, plan: _Plan, index: int) -> Node:
    """The body of item `index` as a node of its own (`NODE[label]`)."""
    body = plan.bodies[index]
    assert isinstance(body, Node)
    return replace(body, id=f"{node.id}[{plan.labels[index]}]", scope=node.scope)


def run_body(ctx: NodeContext, port: FanoutPort, plan: _Plan, index: int,
             control: RunControl, lock: threading.Lock) -> ItemEnd | None:
    """Run one item's node body with its retries (None: a park stopped it). The same
    code runs an item on the parent's host and on any other host (_itemhost.py)."""
    body = plan.bodies[index]
    assert isinstance(body, Node)
    item = item_node(ctx.node, plan, index)
    attempts = max(body.retry.attempts, 1)
    result = NodeResult("failed")
    clock = ctx.clock
    for k in range(attempts):
        own = clock.monotonic() + body.timeout if body.timeout is not None else None
        deadline = min(d for d in (own, ctx.deadline) if d is not None) \
            if own is not None or ctx.deadline is not None else None
        with port.template_scope(deadline, control):
            # An item has no span of its own: its steps' TRACEPARENT names the map node's.
            result = execute(port.item_context(item, new_attempt_id(), deadline,
                                               item_values(ctx.values, plan, index), control,
                                               lock, span=ctx.attempt))
        if result.outcome == "parked":
            return None
        if result.outcome not in ("failed", "timed_out") or k + 1 >= attempts:
            break
        delay = backoff_delay(k + 1, body.retry.backoff, body.retry.max_delay,
                              jitter=ENGINE_JITTER, seed=f"{ctx.run_id}|{item.id}|{k + 1}")
        if clock.sleep(delay, control.wake) or control.stopping:
            if control.stop_reason == "park":
                return None
            break
    if result.outcome == "cancelled" and control.stop_reason == "park":
        return None
    return ItemEnd(index, result.outcome, result.output, result.error)


class _Turns:
    """A session-owned run's agent items reach the session one at a time (it holds one
    step at a time), in the order they were claimed, which is item order; other kinds
    run at once. A ticket per agent item; a stopped one gives its turn up."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._issued = 0
        self._next = 0
        self._done: set[int] = set()

    def ticket(self) -> int:
        with self._cv:
            self._issued += 1
            return self._issued - 1

    def wait(self, ticket: int, control: RunControl) -> None:
        with self._cv:
            while self._next != ticket and not control.stopping:
                self._cv.wait(_POLL)

    def done(self, ticket: int) -> None:
        with self._cv:
            self._done.add(ticket)
            while self._next in self._done:
                self._done.discard(self._next)
                self._next += 1
            self._cv.notify_all()


class _Fanout:
    def __init__(self, ctx: NodeContext, port: FanoutPort, plan: _Plan,
                 shared: bool = False,
                 reused: tuple[str, dict[str, Any]] | None = None) -> None:
        self.ctx, self.port, self.plan, self.shared = ctx, port, plan, shared
        self.reused = reused
        self.node, self.visit, self.deadline = ctx.node, ctx.visit, ctx.deadline
        self.ledger = port.items
        self.done: queue.Queue[tuple[int, ItemEnd | BaseException | None]] = queue.Queue()
        self.controls: dict[int, RunControl] = {}
        self.threads: dict[int, threading.Thread] = {}
        self.emit_lock = threading.Lock()
        self.lost: BaseException | None = None
        self.unsettled: list[ItemEnd] = []  # ended, not yet written (the next claim's)
        executor = ctx.executor
        self.turns = _Turns() if executor is not None and executor.name == "session" \
            else None
        self.tickets: dict[int, int] = {}
        self.parked: set[int] = set()  # items a park stopped (their rows stay running)
        self.idle = 0  # polls until the next claim with nothing to settle
        # The rows as `drive` found them when none was open (a resume after the hosts
        # ended every item): ended rows no longer change, so `result` reads no second copy.
        self.ended: list[ItemRecord] | None = None
        self.logged: set[int] = set()  # items whose host logs the trace has (`_await`)

    # -- the loop ---------------------------------------------------------------------
    def drive(self) -> NodeResult | None:
        # A shared visit's items run on the hosts: entering it, the parent parks without
        # reading its rows (a 1,000-item map's were ~5 ms on the way to its first item).
        # Not with fail_fast, which looks for an earlier failure first, nor on a resume
        # (the hosts most likely ended them all: the rows are read, with no write);
        # `wait_for_hosts` answers False when none is open, and the rows are read then.
        asked = self.shared and not self.plan.fail_fast and not self.ctx.resuming \
            and not self._all_pure()
        if asked and self.ledger.wait_for_hosts(self.node.id, self.visit):
            self.ctx.control.park(ITEMS)
            return NodeResult("parked")
        records = self.ledger.items(self.node.id, self.visit)
        open_ = [r.index for r in records if r.state in ("pending", "running")]
        if not open_:
            self.ended = records
            return None
        if self._all_pure():
            return self._pure(open_)
        failed = any(r.state in ("failed", "timed_out") for r in records)
        if failed and self.plan.fail_fast:
            self._cancel_open("fail_fast: an earlier item failed")
            return None
        if self.shared and self.ctx.resuming and not any(r.state == "pending" for r in records):
            waited = self._await(records)
            if waited is not None:
                self.ended = waited
                return None
            if self.ctx.control.stopping:
                return self._stop()
        if self.shared and not asked and self.ledger.wait_for_hosts(self.node.id, self.visit):
            # Phase 2: the hosts run the items; the run parks holding no slot, and the
            # settle that ends the last item re-queues it (it re-enters and reads them).
            self.ctx.control.park(ITEMS)
            return NodeResult("parked")
        control = self.ctx.control
        while True:
            if control.stopping:
                return self._stop()
            if self.lost is None and not failed:
                # The ends gathered so far and the claim of their slots: one commit. With
                # nothing to settle, a claim is tried every IDLE_POLLS polls only (on a
                # shared node, other hosts' ends free slots too).
                self.idle -= 1
                if (self.unsettled or (self.idle <= 0 and len(self.threads) < self.plan.limit)) \
                        and self._start_claimed() and self.plan.fail_fast:
                    failed = True  # an item ended `interrupted` instead of a third start
                    self._stop_all("cancel", "fail_fast: an item was interrupted twice")
            else:
                self._settle()
            if not self.threads:
                if failed or self.lost is not None:
                    break
                if self.idle >= IDLE_POLLS - 1 and not self._open_left():
                    break  # (looked once per claim: other hosts may hold the rest)
            try:
                got = [self.done.get(timeout=_POLL)]
            except queue.Empty:
                continue
            while not self.done.empty():  # every end that is in: settled together
                got.append(self.done.get_nowait())
            for index, end in got:
                self.threads.pop(index, None)
                self.controls.pop(index, None)
                if isinstance(end, BaseException):
                    self.lost = self.lost or end
                    self._stop_all("park", "lost the run's claim", clean=False)
                    continue
                if end is None:
                    continue  # parked: left running for the next holder
                self.unsettled.append(end)
                if end.outcome in ("failed", "timed_out") and self.plan.fail_fast \
                        and not failed:
                    failed = True
                    self._stop_all("cancel", f"fail_fast: item {self.plan.labels[end.index]}"
                                   f" {end.outcome}")
        if self.lost is not None:
            raise self.lost
        self._settle()
        if failed and self.plan.fail_fast:
            self._cancel_open("fail_fast: another item failed")
        return None

    def _settle(self) -> None:
        ends, self.unsettled = self.unsettled, []
        try:
            if ends and self.lost is None:
                self.ledger.settle(self.node.id, self.visit, ends)
        finally:
            self._written(ends)

    def _open_left(self) -> bool:
        return any(r.state in ("pending", "running")
                   for r in self.ledger.items(self.node.id, self.visit))

    def _start_claimed(self) -> bool:
        """Claim free slots and start their items; True when the claim ended an item
        `interrupted` (it would have been its third start)."""
        ends, self.unsettled = self.unsettled, []
        if ends:
            self.port.crash("before_items_settled")
        try:
            claimed, interrupted = self.ledger.claim(self.node.id, self.visit,
                                                     self.plan.limit, ends)
        finally:
            self._written(ends)
        self.idle = 0 if claimed else IDLE_POLLS
        for index, start in claimed:
            body = self.plan.bodies[index]
            if self.turns is not None and isinstance(body, Node) and body.kind == "agent":
                self.tickets[index] = self.turns.ticket()
            control = RunControl()
            thread = threading.Thread(target=self._item, args=(index, start, control),
                                      daemon=True,
                                      name=f"wfrun-item-{self.node.id}[{index}]")
            self.controls[index] = control
            self.threads[index] = thread
            thread.start()
        if claimed:
            self.port.crash("after_items_claimed")
        return bool(interrupted)  # ended `failed` by the ledger; the result reads them

    def _stop_all(self, how: str, reason: str, *, clean: bool = True) -> None:
        for control in list(self.controls.values()):
            if how == "park":
                control.park(reason, clean=clean)
            else:
                control.cancel(reason)

    def _await(self, records: list[ItemRecord]) -> list[ItemRecord] | None:
        """Hosts run the visit's last items and none is left pending (the claim of the
        last one re-queued this run: `_itemclaims._claim_node`): wait for them here,
        recording the logs of those that ended meanwhile, instead of parking again to
        be resumed at the last one's end (the resume, the rows and the logs then came
        after it). None: park after all (the run is stopping, an item went back to
        pending, or none ended for HOSTS_STALL seconds: a host may need this slot)."""
        rows = {r.index: r for r in records}
        open_ = [r.index for r in records if r.state in _OPEN]
        self._host_logs([i for i in rows if rows[i].state not in _OPEN])
        clock, control = self.ctx.clock, self.ctx.control
        key = (self.ctx.run_id, self.node.id, self.visit)
        ended = ITEM_ENDS.watch(*key)
        try:
            stall = clock.monotonic() + HOSTS_STALL
            while open_:
                if control.stopping or clock.monotonic() > stall:
                    return None
                clock.sleep(HOSTS_LOOK, ended)
                ended.clear()
                fresh = self.ledger.items(self.node.id, self.visit, open_)
                if any(r.state == "pending" for r in fresh):
                    return None
                done = [r for r in fresh if r.state not in _OPEN]
                if done:
                    stall = clock.monotonic() + HOSTS_STALL
                    rows.update((r.index, r) for r in done)
                    open_ = [i for i in open_ if rows[i].state in _OPEN]
                    self._host_logs([r.index for r in done])
        finally:
            ITEM_ENDS.forget(*key, ended)
        return [rows[i] for i in sorted(rows)]

    def _stop(self) -> NodeResult:
        parent = self.ctx.control
        if parent.stop_reason == "park":
            self._stop_all("park", parent.reason or "parked", clean=parent.clean)
        else:
            self._stop_all("cancel", parent.reason or "cancelled")
        self._join()
        if self.lost is not None:
            raise self.lost
        self._settle()  # what ended before the stop stays ended (a park's resume skips it)
        if parent.stop_reason == "park":
            if parent.clean and self.parked:
                # Stopped, not dead: their starts are not counted against the budget.
                self.ledger.release(self.node.id, self.visit, sorted(self.parked))
            return NodeResult("parked")
        self._cancel_open(parent.reason or "cancelled")
        # The cancelled end lists the items and keeps the outputs of those that ended
        # ok, as a failed end does: a rerun of the cancelled run reuses them.
        ended = self.result(len(self.plan.bodies))
        return NodeResult("cancelled", ended.output,
                          error={"code": "cancelled", "message": parent.reason or "cancelled"},
                          extra={**ended.extra, "output": ended.output})

    def abandon(self) -> None:
        self._stop_all("park", "the run's runner stopped", clean=False)
        for thread in list(self.threads.values()):
            thread.join(timeout=30)

    def _join(self) -> None:
        while self.threads:
            index, end = self.done.get()
            self.threads.pop(index, None)
            self.controls.pop(index, None)
            if isinstance(end, BaseException):
                self.lost = self.lost or end
            elif end is not None:
                self.unsettled.append(end)
            else:
                self.parked.add(index)

    def _cancel_open(self, reason: str) -> None:
        self.ledger.cancel_open(self.node.id, self.visit,
                                {"code": "cancelled", "message": reason})

    # -- pure bodies --------------------------------------------------------------------
    def _all_pure(self) -> bool:
        return all(isinstance(b, Node) and b.pure for b in self.plan.bodies)

    def _pure(self, open_: list[int]) -> NodeResult | None:
        batch: list[ItemEnd] = []
        for index in open_:
            if self.ctx.control.stopping:
                break
            body = self.plan.bodies[index]
            assert isinstance(body, Node)
            result = execute(self.port.item_context(
                self._item_node(body, index), "", self.deadline, self._item_values(index),
                self.ctx.control, self.emit_lock))
            if result.outcome == "parked" or (result.outcome == "cancelled"
                                              and self.ctx.control.stopping):
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
        if self.ctx.control.stopping:
            return self._stop()
        if self.plan.fail_fast and self._open_left():
            self._cancel_open("fail_fast: another item failed")
        return None

    def _masked(self, end: ItemEnd | None) -> ItemEnd | None:
        """A secret's value never reaches the store (as `RunDriver.emit` masks events)."""
        if end is None:
            return None
        mask = self.ctx.secrets.mask_json
        return replace(end, output=mask(end.output), error=mask(end.error))

    # -- one item -------------------------------------------------------------------------
    def _item_node(self, body: Node, index: int) -> Node:
        return item_node(self.node, self.plan, index)

    def _item_values(self, index: int) -> dict[str, Any]:
        return item_values(self.ctx.values, self.plan, index)

    def _item(self, index: int, start: int, control: RunControl) -> None:
        end: ItemEnd | BaseException | None = None
        ticket = self.tickets.get(index)
        try:
            if ticket is not None and self.turns is not None:
                self.turns.wait(ticket, control)
            end = self._masked(self._run_item(index, control))
        except Exception as exc:  # a bug in one item ends that item, never the run loop
            end = ItemEnd(index, "failed", error={"code": "internal_error",
                                                  "message": type(exc).__name__})
        finally:
            # An ending keeps its session turn until the run loop has written it
            # (`_written`): the next agent item reaches the session only once the store
            # no longer calls this one running. Anything else gives the turn up now.
            if ticket is not None and self.turns is not None and not isinstance(end, ItemEnd):
                self.tickets.pop(index, None)
                self.turns.done(ticket)
        self.done.put((index, end))  # the run loop writes it with the next claim

    def _written(self, ends: list[ItemEnd]) -> None:
        """Give up the session turns of items whose endings were just written."""
        if self.turns is None:
            return
        for end in ends:
            ticket = self.tickets.pop(end.index, None)
            if ticket is not None:
                self.turns.done(ticket)

    def _run_item(self, index: int, control: RunControl) -> ItemEnd | None:
        body = self.plan.bodies[index]
        if isinstance(body, ChildWorkflowBody):
            return self._child(body, index, control)
        return run_body(self.ctx, self.port, self.plan, index, control, self.emit_lock)

    def _child(self, body: ChildWorkflowBody, index: int,
               control: RunControl) -> ItemEnd | None:
        """A `workflow:` body: a linked child run, its id fixed by the item, so a resumed
        parent finds the child it started (and resumes it, or reads how it ended)."""
        values = self._item_values(index)
        scope = self.port.template_scope(self.deadline, control)
        try:
            with scope:
                value = render_native(body.input, values) if body.input is not None else {}
        except TemplateError as exc:
            return ItemEnd(index, "failed", error={"code": "template_error",
                                                   "message": f"input: {exc}"[:2000]})
        label = self.plan.labels[index]
        digest = hashlib.sha256(f"{self.node.id}|{self.visit}|{label}".encode()).hexdigest()
        run_id = f"{self.ctx.run_id}-{digest[:8]}"
        result = self.port.child_run(body.workflow, value, run_id, control)
        if result.outcome == "parked":
            return None
        error = dict(result.error or {}, child_run_id=run_id) if result.error else None
        return ItemEnd(index, result.outcome, result.output, error)

    def _host_logs(self, indexes: list[int] | None = None) -> None:
        """Items other hosts ran kept their logs in the ledger; the run's trace has one
        writer, this node, which records them as its own items' (`NODE[i]`), all in one
        trace write (a write per log made a 1,000-item map's end ~1,000 appends).
        `indexes`: those items' (a parent waiting for its last items records the logs
        of those that ended as they do); None: every item's not recorded yet."""
        if indexes is None and self.logged:
            indexes = [i for i in range(len(self.plan.labels)) if i not in self.logged]
        if indexes is not None:
            if not indexes:
                return
            self.logged.update(indexes)
        labels, node = self.plan.labels, self.node.id
        logs = [(f"{node}[{labels[index]}]", attempt, log)
                for index, attempt, log in self.ledger.logs(node, self.visit, indexes)
                if 0 <= index < len(labels)]
        if logs:
            with self.emit_lock:
                self.port.record_logs(logs)

    # -- the node's result ------------------------------------------------------------------
    def result(self, n: int) -> NodeResult:
        self._host_logs()
        records = self.ended if self.ended is not None \
            else self.ledger.items(self.node.id, self.visit)
        summary: list[dict[str, Any]] = [{"outcome": r.state, "error": r.error,
                                          "starts": r.starts} for r in records]
        if self.reused is not None:  # a rerun's reused items: no start of this run
            of, carried = self.reused
            for r, row in zip(records, summary, strict=True):
                if r.state == "ok" and self.plan.labels[r.index] in carried:
                    row.update(starts=0, reused_from=of)
        # An item's output is kept as its body returned it (masked, never externalized:
        # the ledger's rows and `ItemEnd`s hold plain values), so it is not walked for
        # artifact refs (a 1,000-item map's end walked every item); the node's end event
        # externalizes and escapes the list as any output.
        outputs = [r.output if r.state == "ok" else None for r in records]
        if isinstance(self.node.spec, ParallelSpec):
            output: Any = dict(zip(self.plan.labels, outputs, strict=True))
            extra: dict[str, Any] = {"branches": dict(zip(self.plan.labels, summary,
                                                          strict=True))}
        else:
            output = outputs
            extra = {"items": summary}
        extra["item_steps"] = sum(row["starts"] for row in summary)
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
