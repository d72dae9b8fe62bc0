"""Server-sent events for one run, fed by tailing its trace.

The stream keeps the events it has read and asks the reader only for the bytes
appended since (`RunReader.trace_tail`), so following a run costs one small read
per poll however long its trace is; the bundle is never re-read whole. A torn
last line is simply not consumed until it is whole. Each batch of new events is
re-folded into the run view (runview.run_live) and sent as one `run` event; when
the run has ended an `end` event tells the page to stop listening.

While an attempt runs, what it has printed so far (its live log: a shell step's
output, an `openai` agent step's streamed answer) is sent as `live` events, each
the text appended since the last (masked by the engine before it reached the
disk, and by the UI's own secrets, a tail that could begin one held back until the
next read shows it does not; the log itself is bounded per turn). A new attempt or
turn starts with `reset`, and `{"node": null}` says none runs now.
"""

from __future__ import annotations

import asyncio
import codecs
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from runner._safety import mask, mask_values, unsafe_tail
from runner.engine import RunReader
from runner.errors import WfrunError
from runner.host.runtime._logs import STREAMS, running_attempt
from runner.host.runtime._runstate import ENDED_STATES, run_state
from runner.store import LaunchBook

from ._data import Site, launch_of
from ._fanoutview import live_items, running_fanout
from ._runview import masked, run_live

#: How often the trace's length is checked: well inside the 200 ms update goal.
POLL_SECONDS = 0.05
#: A comment line this often keeps proxies from closing an idle stream and lets the
#: server notice a page that went away.
HEARTBEAT_POLLS = 300
#: How often (in polls) a run with no bundle yet looks at its launch row again.
LAUNCH_POLLS = 10
ENDED = frozenset(ENDED_STATES)
LAUNCH_ENDED = frozenset({"failed", "cancelled", "done"})


def sse(event: str, data: Any) -> str:
    """One SSE message; JSON never holds a raw newline, so one `data:` line suffices."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n"


class RunTail:
    """The events of one run's trace read so far, and where the next read starts."""

    def __init__(self, reader: RunReader, run_id: str) -> None:
        self.reader = reader
        self.run_id = run_id
        self.events: list[dict[str, Any]] = []
        self.offset = 0
        self.snapshot: dict[str, Any] | None = None

    def poll(self) -> bool:
        """Read what was appended; True when there were new whole events."""
        if not self.reader.exists(self.run_id):
            return False
        if self.snapshot is None:
            try:
                self.snapshot = self.reader.workflow(self.run_id)
            except WfrunError:
                return False  # the bundle is being made: the snapshot comes first
        read = self.reader.trace_tail(self.run_id, self.offset, len(self.events) + 1)
        self.offset = read.valid_bytes
        for event in read.events:
            if event.get("type") == "node_log":  # long streams live in artifacts/
                event["payload"] = self.reader.live(self.run_id, event.get("payload") or {})
            self.events.append(event)
        return bool(read.events)


class LiveTail:
    """The running attempt's live log as far as the page has been sent it."""

    def __init__(self, reader: RunReader, run_id: str, secrets: tuple[str, ...]) -> None:
        self.reader = reader
        self.run_id = run_id
        self.secrets = secrets
        self.values = mask_values(secrets)
        self.running: tuple[str, str, int] | None = None
        self.offsets: dict[str, int] = {}
        self.decoders: dict[str, codecs.IncrementalDecoder] = {}
        # Masked text whose end could begin one of this process's secrets, split
        # across two reads: sent once the next read shows it does not.
        self.pending: dict[str, str] = {}

    def poll(self, events: list[dict[str, Any]], moved: bool) -> list[dict[str, Any]]:
        """`live` messages for what was printed since the last poll; `moved`: new
        trace events came, so the running attempt may have changed."""
        out: list[dict[str, Any]] = []
        if moved:
            running = running_attempt(self.reader, events, self.run_id) if events else None
            if running != self.running:
                self.running = running
                self.offsets = dict.fromkeys(STREAMS, 0)
                self.decoders = {s: codecs.getincrementaldecoder("utf-8")(errors="replace")
                                 for s in STREAMS}
                self.pending = dict.fromkeys(STREAMS, "")
                out.append({"node": running[0], "attempt": running[1], "reset": True}
                           if running else {"node": None})
        if self.running is None:
            return out
        node, attempt, turn = self.running
        for stream in STREAMS:
            data = self.reader.live_log(self.run_id, node, attempt, stream,
                                        self.offsets[stream], turn)
            if not data:
                continue
            self.offsets[stream] += len(data)
            text = mask(self.pending[stream] + self.decoders[stream].decode(data),
                        self.values)
            cut = len(text) - unsafe_tail(text, self.values)
            text, self.pending[stream] = text[:cut], text[cut:]
            if text:
                out.append({"node": node, "attempt": attempt, "stream": stream,
                            "text": masked(text, self.secrets)})
        return out


async def run_events(site: Site, run_id: str, *,
                     disconnected: Callable[[], Awaitable[bool]],
                     poll: float = POLL_SECONDS) -> AsyncIterator[str]:
    tail = RunTail(site.reader, run_id)
    live = LiveTail(site.reader, run_id, site.secrets)
    polls = 0
    launch_status: str | None = None
    first = True
    shown: str | None = None  # the launch status the last view was made with
    items_shown: tuple[Any, ...] = ()  # the fan-out items the last view was made with
    while True:
        fresh = tail.poll()
        moved = fresh or first
        record = None
        fanout = None
        if tail.snapshot is not None and not fresh and not first and polls % LAUNCH_POLLS == 0:
            # No new events, but the launch may have moved (parked, resumed): its state is
            # part of the run's (run_state), so a change repaints too. So may a running
            # map's items: their rows change in the store, the trace only at the node's end.
            record = launch_of(site, run_id)
            fanout = live_items(site.store(), run_id, running_fanout(tail.events))
            fresh = (record.status if record is not None else None) != shown \
                or fanout.key() != items_shown
        if tail.snapshot is not None and (fresh or first):
            first = False
            record = record or launch_of(site, run_id)
            shown = record.status if record is not None else None
            if fanout is None:
                fanout = live_items(site.store(), run_id, running_fanout(tail.events))
            items_shown = fanout.key()
            view = run_live(run_id, tail.events, tail.snapshot, site.secrets, launch=record,
                            continued_by=tail.reader.continued_by(run_id), fanout=fanout)
            view = tail.reader.live(run_id, view)  # long strings back from artifacts/
            yield sse("run", view)
            if view["status"] in ENDED:
                yield sse("end", {"status": view["status"]})
                return
        elif tail.snapshot is None and polls % LAUNCH_POLLS == 0:
            store = site.store()
            record = LaunchBook(store).get(run_id) if store is not None else None
            status = record.status if record is not None else None
            if status != launch_status:
                launch_status = status
                yield sse("launch", {"run_id": run_id, "launch": status,
                                     "status": run_state(record, None) if record else None})
            if status in LAUNCH_ENDED and not tail.reader.exists(run_id):
                yield sse("end", {"status": status})
                return
        if tail.snapshot is not None:  # after the view: a page paints the run first
            try:
                for message in live.poll(tail.events, moved):
                    yield sse("live", message)
            except WfrunError:
                pass  # a live log is a convenience: the recorded log follows
        polls += 1
        if polls % HEARTBEAT_POLLS == 0:
            yield ": keep-alive\n\n"
        if polls % LAUNCH_POLLS == 0 and await disconnected():
            return  # Starlette also cancels a stream whose client left; this is a backstop
        await asyncio.sleep(poll)
