"""Step logs: what each shell action and command agent printed (`wfrun logs`, `show`).

The engine records one `node_log` event per attempt (stdout and stderr, bounded,
secrets already masked, long streams in artifacts/); this module reads them back
through `RunReader`, never from bundle files, so it works on a run another
process is executing. While an attempt runs, `follow_logs` tails its live log
(engine/_livelog.py) and then takes only the rest from the recorded event.
"""

from __future__ import annotations

import codecs
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from runner import _jsonin as jsonin
from runner.clock import Clock, SystemClock
from runner.engine import RunReader, fold, fold_attempts
from runner.errors import NotFoundError
from runner.store import LaunchBook, Store, StoreError

Stream = Literal["stdout", "stderr"]
STREAMS: tuple[Stream, ...] = ("stdout", "stderr")
LOG_EVENT = "node_log"
SUMMARY_LINES = 10  # `show` prints this many last lines of each stream of a failed node


@dataclass(frozen=True)
class StepLog:
    node: str
    attempt: str | None
    at: str | None
    exit_code: int | None
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    cached_from: str | None = None  # a `cache:` hit: the run whose result it reused

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _reader(runs: Path | RunReader) -> RunReader:
    return runs if isinstance(runs, RunReader) else RunReader(runs)


def _entries(reader: RunReader, run_id: str, events: list[dict[str, Any]],
             node: str | None) -> list[StepLog]:
    found = []
    for event in events:
        if event.get("type") != LOG_EVENT or (node is not None
                                               and not _addresses(node, event.get("node"))):
            continue
        p = reader.live(run_id, event.get("payload") or {})  # artifacts read back
        code = p.get("exit_code")
        found.append(StepLog(str(event.get("node")), event.get("attempt"), event.get("at"),
                             code if isinstance(code, int) else None,
                             str(p.get("stdout") or ""), str(p.get("stderr") or ""),
                             bool(p.get("stdout_truncated")), bool(p.get("stderr_truncated")),
                             (p.get("cached_from") or {}).get("run_id")))
    return found


def _addresses(asked: str, logged: object) -> bool:
    """`files` finds its items' logs (`files[3]`, recorded as such by a map or a parallel
    node, engine/_fanout.py); `files[3]` finds that item's."""
    return logged == asked or (isinstance(logged, str) and logged.startswith(asked + "["))


def _check_node(run_id: str, events: list[dict[str, Any]], node: str) -> None:
    ran = list(dict.fromkeys(a.node for a in fold_attempts(events) if not a.boundary))
    if node.endswith("]") and "[" in node and node.split("[", 1)[0] in ran:
        return  # an item of a fan-out node (NODE[3], NODE[branch])
    if node not in ran:
        listed = ", ".join(ran) if ran else "none yet"
        raise NotFoundError(f"run '{run_id}' has no node '{node}' that ran (nodes that ran: "
                            f"{listed})")


def run_logs(runs: Path | RunReader, run_id: str, node: str | None = None) -> list[StepLog]:
    """Every recorded log of the run (or of one node), oldest first."""
    reader = _reader(runs)
    events = reader.trace(run_id)  # InputError / NotFoundError for a bad run id
    if node is not None:
        _check_node(run_id, events, node)
    return _entries(reader, run_id, events, node)


@dataclass(frozen=True)
class LiveText:
    """Output a running attempt printed since the last call (its live log)."""

    node: str
    attempt: str
    stream: Stream
    text: str

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "live": True}


class _Tail:
    """What has been read of one stream of one running attempt's live log."""

    def __init__(self, turn: int) -> None:
        self.turn = turn  # the attempt's logs recorded before this live one
        self.offset = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.shown = ""


def _rest(entry: StepLog, tails: dict[tuple[str, str], _Tail]) -> StepLog:
    """`entry` without what its live log already showed (all of it when the two differ,
    which a mask that only whole lines reveal can cause)."""
    rest = {}
    for stream in ("stdout", "stderr"):
        text = getattr(entry, stream)
        tail = tails.pop((str(entry.attempt), stream), None)
        shown = tail.shown if tail is not None else ""
        rest[stream] = text[len(shown):] if shown and text.startswith(shown) else text
    return replace(entry, stdout=rest["stdout"], stderr=rest["stderr"])


def _turns(events: list[dict[str, Any]], attempt: str) -> int:
    return sum(1 for e in events if e.get("type") == LOG_EVENT and e.get("attempt") == attempt)


def _running(reader: RunReader, events: list[dict[str, Any]],
             run_id: str) -> list[tuple[str, str, int]]:
    """The (node, attempt, turn) running now: turn counts the attempt's logs recorded
    so far (a command agent logs each turn, and its next one is live). A fan-out node's
    running items (`NODE[i]`) are in no event until they end: their live logs name
    them."""
    state = fold(run_id, events) if events else None
    if state is None or state.current_node is None or state.current_attempt is None:
        return []
    node = state.current_node
    started = next((e for e in reversed(events) if e.get("type") == "node_started"
                    and e.get("node") == node), None)
    # The kind table is the compiler's: read it only here, so `runs` and `status`
    # (which import this module) never load the compiler (tests/unit/test_cold_imports.py).
    from runner.compiler._fanout import FANOUT_KINDS

    if started is not None and (started.get("payload") or {}).get("kind") in {
            k.name for k in FANOUT_KINDS}:
        # A live log whose turn is not the next one is a finished turn's, being removed.
        return [(item, attempt, turn) for item, attempt, turn in reader.live_attempts(
                run_id, node) if turn == _turns(events, attempt)]
    attempt = str(state.current_attempt)
    return [(node, attempt, _turns(events, attempt))]


def running_attempt(reader: RunReader, events: list[dict[str, Any]],
                    run_id: str) -> tuple[str, str, int] | None:
    """The (node, attempt, turn) whose live log is being written now, if one node's
    is: a fan-out node's items each have their own (`logs --follow RUN NODE[i]`)."""
    running = _running(reader, events, run_id)
    return running[0] if len(running) == 1 and not running[0][0].endswith("]") else None


def running_output(runs: Path | RunReader, run_id: str,
                   node: str | None = None) -> list[LiveText]:
    """What the attempts running now (of `node`, when given: a fan-out node's items
    too) have printed so far, per stream: their live logs, which `run_logs` does not
    have until an attempt ends."""
    reader = _reader(runs)
    events = reader.trace(run_id)
    out = []
    for running in _running(reader, events, run_id):
        if node is not None and not _addresses(node, running[0]):
            continue
        for stream in STREAMS:
            data = reader.live_log(run_id, running[0], running[1], stream, 0, running[2])
            if data:
                out.append(LiveText(running[0], running[1], stream,
                                    data.decode("utf-8", errors="replace")))
    return out


def _item_address(node: str | None) -> tuple[str, str] | None:
    """`files[3]` -> ("files", "3"); None for a node's own id."""
    if node is None or not node.endswith("]") or "[" not in node:
        return None
    base, _, label = node[:-1].partition("[")
    return base, label


def _node_ended(events: list[dict[str, Any]], node: str) -> bool:
    """The node ended after its last start (its items with it)."""
    for event in reversed(events):
        if event.get("node") != node:
            continue
        if event.get("type") in ("node_finished", "node_failed"):
            return True
        if event.get("type") == "node_started":
            return False
    return False


ItemState = Callable[[list[dict[str, Any]], str, str],
                     tuple[str, list[tuple[str, dict[str, Any]]]] | None]


def store_item_state(store: Store, run_id: str) -> ItemState:
    """`follow_logs`'s `item_state` from the store's item rows: the row of item `label`
    (a map's index, a parallel branch's name) of the node's latest visit, and the logs
    another host recorded for it there ((attempt, `node_log` payload) each: the
    parent's trace gets them only when the node ends)."""
    from runner.store.domain._fanout import ItemKey

    def state(events: list[dict[str, Any]], node: str,
              label: str) -> tuple[str, list[tuple[str, dict[str, Any]]]] | None:
        visit = fold(run_id, events).visits.get(node, 1) if events else 1
        started = next((e.get("payload") or {} for e in reversed(events)
                        if e.get("type") == "node_started" and e.get("node") == node), {})
        names = started.get("branches")
        if isinstance(names, list):  # a parallel node: rows in branch order
            index = names.index(label) if label in names else None
        else:
            index = int(label) if label.isdigit() else None
        if index is None:
            return None
        key = ItemKey(run_id, node, visit)
        try:
            rows = store.fanout.items(key)
            if index >= len(rows):
                return None
            logs = [(log.attempt, jsonin.loads(log.log_json)) for log in store.fanout.logs(key)
                    if log.index == index] if rows[index].state not in ("pending",
                                                                        "running") else []
        except StoreError:
            return None
        return rows[index].state, logs

    return state


#: An item's state (from the store: `item_state`) as the status `follow_logs` returns.
ITEM_STATUS = {"ok": "completed", "failed": "failed", "timed_out": "timed_out",
               "cancelled": "cancelled"}


def await_start(reader: RunReader, launches: LaunchBook | None, run_id: str, *,
                clock: Clock | None = None, poll: float = 0.2,
                on_wait: Callable[[str], None] | None = None,
                stop: threading.Event | None = None) -> str | None:
    """Wait while `run_id` is a launch not yet started (no bundle to follow): None once
    it has one, or when the store does not know it (`follow_logs` then says not found);
    the launch's status when it ended without ever starting (cancelled in the queue).
    `on_wait(status)` is told once, when there is a wait."""
    clock = clock or SystemClock()
    told = False
    while launches is not None and not reader.exists(run_id):
        row = launches.get(run_id)
        if row is None:
            return None
        if row.status in ("done", "failed", "cancelled"):
            # It may have started and ended between the two reads: then follow it.
            return None if reader.exists(run_id) else row.status
        if on_wait is not None and not told:
            on_wait(row.status)
            told = True
        if stop is not None and stop.is_set():
            return None
        clock.sleep(poll, stop)
    return None


def follow_logs(runs: Path | RunReader, run_id: str, node: str | None,
                on_log: Callable[[StepLog], None], *, clock: Clock | None = None,
                poll: float = 0.2, stop: threading.Event | None = None,
                on_live: Callable[[LiveText], None] | None = None,
                item_state: ItemState | None = None) -> str:
    """Call `on_log` for each log as it is recorded until the run stops running (or
    `stop` is set); the run's status then. A node that has not run yet is waited for.
    A fan-out item (`NODE[3]`) is followed until it ends: `item_state(events, node,
    label)` says its state (the store's row; None when unknown), else until its node
    ends; the item's outcome is returned as a run's (ok: `completed`).

    With `on_live`, a running attempt's output is passed on as it is printed (its live
    log), and its recorded log then carries only the rest."""
    clock = clock or SystemClock()
    reader = _reader(runs)
    seen = 0
    tails: dict[tuple[str, str], _Tail] = {}
    item = _item_address(node)
    while True:
        events = reader.trace(run_id)
        # Read before the logs: an item's log is recorded before its row ends, so a
        # state read here as ended has its whole log in the trace read next.
        ended = None
        held: list[tuple[str, dict[str, Any]]] = []  # an item's logs in the store
        if item is not None:
            found = item_state(events, *item) if item_state is not None else None
            if found is not None and found[0] not in ("pending", "running"):
                ended, held = found
                events = reader.trace(run_id)
            elif found is None and _node_ended(events, item[0]):
                ended = "ended"
        logs = [e for e in events if e.get("type") == LOG_EVENT]
        entries = _entries(reader, run_id, logs[seen:], node)
        if ended is not None and not any(e.get("node") == node for e in logs):
            # Another host ran the item: its logs are in the store until the node ends.
            entries += _entries(reader, run_id, [
                {"type": LOG_EVENT, "node": node, "attempt": attempt, "payload": payload}
                for attempt, payload in held], node)
        for entry in entries:
            on_log(_rest(entry, tails))
        seen = len(logs)
        status = fold(run_id, events).status if events else "running"
        if on_live is not None and ended is None:
            for running in _running(reader, events, run_id):
                if node is None or _addresses(node, running[0]):
                    for stream in STREAMS:
                        _tail_live(reader, run_id, running, stream, tails, on_live)
        if ended is not None:
            return ITEM_STATUS.get(ended, status if status != "running" else "completed")
        if status != "running" or (stop is not None and stop.is_set()):
            if node is not None and status != "running":
                _check_node(run_id, events, node)
            return status
        clock.sleep(poll, stop)


def _tail_live(reader: RunReader, run_id: str, running: tuple[str, str, int],
               stream: Stream, tails: dict[tuple[str, str], _Tail],
               on_live: Callable[[LiveText], None]) -> None:
    node, attempt, turn = running
    tail = tails.get((attempt, stream))
    if tail is None or tail.turn != turn:
        tail = tails[(attempt, stream)] = _Tail(turn)
    data = reader.live_log(run_id, node, attempt, stream, tail.offset, turn)
    if not data:
        return
    tail.offset += len(data)
    text = tail.decoder.decode(data)
    if text:
        tail.shown += text
        on_live(LiveText(node, attempt, stream, text))


def last_lines(text: str, count: int = SUMMARY_LINES) -> list[str]:
    return text.rstrip("\n").splitlines()[-count:] if text.strip() else []


def failure_summary(runs: Path | RunReader, run_id: str,
                    events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """For a run that failed in a node: that node, its error and the last lines of both
    streams of its last logged attempt (None when no node failed it)."""
    state = fold(run_id, events) if events else None
    if state is None or state.status not in ("failed", "timed_out") or not state.error:
        return None
    node = state.error.get("node")
    if not isinstance(node, str):
        return None
    reader = _reader(runs)
    logs = _entries(reader, run_id, events, node)
    error = state.error.get("message")
    attempts = [a for a in fold_attempts(events) if not a.boundary]
    kinds = {a.node: a.kind for a in attempts}
    if not logs and kinds.get(node) == "fail":
        # Failed on purpose (a `fail` node after a failed check, say): the last node that
        # failed with logs is the one to look at.
        for failed in reversed([a for a in attempts if a.ended and a.outcome != "ok"]):
            logs = _entries(reader, run_id, events, failed.node)
            if logs:
                node = failed.node
                error = failed.error_message
                break
    summary: dict[str, Any] = {"node": node, "error": error,
                               "stdout_tail": [], "stderr_tail": [], "exit_code": None}
    if logs:
        last = logs[-1]
        summary.update({"stdout_tail": last_lines(last.stdout),
                        "stderr_tail": last_lines(last.stderr), "exit_code": last.exit_code})
    return summary
