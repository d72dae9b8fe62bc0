"""A run bundle held as database rows (`BundleRows`, engine/_rows.py).

The same narrow interface as `FolderBundle` and the same write order: trace
events (keyed by run id and `seq`), then the state document, then the manifest
(a few writes share a transaction: "Batches" below); artifacts (strings over
4 KiB, engine/_state.py) are rows keyed by their sha256 under the run. A
writer with a claim token is fenced by the database alone: it checks the
launch's claim token in the same transaction as the write, so a host whose
claim was taken over writes nothing however late it wakes (the caller's fence,
which would ask the same a round trip earlier, is consulted only by a writer
without a claim). A committed transaction is durable, so there is no fsync, no
torn tail to repair and no lock file: the claim is the single-writer guarantee.

A write the database could not take (`unavailable`: a restart, a network blip) is
tried again every 0.2 s on the engine's clock for up to `patience` seconds (a third of
the claim's lease; `PATIENCE` by default), as the
fence waits for a vanished store; the first try may have committed before its
answer was lost, so a retry that finds its own write already there counts as done.
Past the patience the run is let go (`ClaimLost`): nothing more is written, and the
launch's lease expires so a host that reaches the database resumes it.

Batches: a write a folder would not fsync and that nothing reads before the
next write (the workflow snapshot, the state projection) is held and sent in the
next write's transaction (`write_batch`), so the snapshot commits with the first
manifest and the state with the ending. From a run's ending event (run_completed,
run_failed, ...) every write is held until the seal: event, state, manifest and
seal are one transaction, all or nothing (a kill before it, at `before_seal`,
leaves the run as it was after its last node, and the next holder records the
ending again; nothing reruns). `node_started` is not held: it is written before
the node runs, as the crash-loop budget (engine.NODE_START_BUDGET) counts it; the
engine sends a node's end in one append with the next node's start (or with the
run's ending). The bundle's row is created by the first write, with the snapshot,
the first manifest and `run_started`: a creator killed before it leaves no row.
`close` sends what is still held (a parked run's state).

Joined to its launch (a claimed run of the launch queue, `LaunchLink` in
engine/_runner.py): the first write also waits for the first node's start, and
commits in the launch's `running` transition (`begin`); the seal commits in the
transition that records how the run ended. A 3-node run is then 4 transactions, and its
launch 6 with the enqueue and the claim (was 14, then 10, then 9): [create,
snapshot, manifest, run_started, a started, `running`], [a ended, b started],
[b ended, c started], [c ended, ending, seal, the launch's ending]. A run that
ends before any node starts sends its first write as soon as its ending comes.

Live logs of a running attempt stay files on the host that runs it
(`<runs_dir>/<run id>/logs/`): they are scratch, removed once the attempt's
`node_log` event is recorded in the trace.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from runner._canonical import Spliced
from runner._private import private_dirs
from runner.clock import Clock, SystemClock
from runner.errors import ClaimLost, NotFoundError, OperationFailed

from ._bundlefmt import ARTIFACTS, ENDED, LOGS, Fence, TraceRead, always
from ._rows import BundleRows, LaunchStep

#: Trace events that end a run (or its attempt): from one, the writer holds every
#: write until the seal and sends them in one transaction.
ENDINGS = frozenset({"run_completed", "run_failed", "run_timed_out", "run_cancelled",
                     "run_waiting"})
PATIENCE = 10.0  # seconds a write waits for an unreachable database (a third of a lease)
RETRY_EVERY = 0.2


class DatabaseBundle:
    """One run's rows, open for writing by the holder of `claim` (None: unfenced)."""

    def __init__(self, rows: BundleRows, run_id: str, logs_root: Path,
                 fence: Fence = always, claim: str | None = None,
                 clock: Clock | None = None, durability: str = "full") -> None:
        self.rows = rows
        self.sync = durability == "full"  # normal: no write waits for the log flush
        self.clock = clock or SystemClock()
        self.run_id = run_id
        self.logs_root = logs_root  # this host's folder for the run's live logs
        self._fence = fence
        self.claim = claim
        self._sealed = False
        self._manifest: str | None = None  # the text this writer last wrote
        # Writes held for the next transaction (module doc, "Batches").
        self._docs: dict[str, str] = {}
        self._events: list[tuple[int, str]] = []
        self._durable = False  # a held write is one a folder would fsync
        self._ending = False  # a terminal event is held: the ending goes in one batch
        self._create = False  # the bundle's row goes with the first write (`create`)
        # The launch's `running` step, for a claimed launch's run (set by the engine):
        # the first write commits in it (module doc); the seal is given its ending.
        self.begin: Callable[[], LaunchStep | None] | None = None
        # How long a write waits for an unreachable database: the engine sets a third
        # of the claim's lease (waiting longer is safe: the write checks the lease).
        self.patience = PATIENCE
        self._json = Spliced()  # a long output is encoded once (trace, ending, state)

    @property
    def fence(self) -> Fence:
        return self._fence

    @fence.setter
    def fence(self, fence: Fence) -> None:
        # The coordinator drops the fence when a cancel won before the run started: the
        # row no longer holds our claim, and the cancelled ending is still ours to write.
        self._fence = fence
        self.claim = None

    # -- opening ----------------------------------------------------------------
    @classmethod
    def create(cls, rows: BundleRows, run_id: str, logs_root: Path, fence: Fence = always,
               claim: str | None = None, clock: Clock | None = None,
               durability: str = "full") -> DatabaseBundle:
        if claim is None and not fence():  # a claim is checked by the insert itself
            raise ClaimLost(f"no claim on run '{run_id}'; not creating it")
        bundle = cls(rows, run_id, logs_root, fence, claim, clock, durability)
        # The row is inserted by the first write's transaction, with the snapshot, the
        # first manifest and `run_started` (module doc, "Batches"): a run that dies
        # before it leaves nothing, not a half-made bundle.
        bundle._create = True
        return bundle

    @classmethod
    def open(cls, rows: BundleRows, run_id: str, logs_root: Path, fence: Fence = always,
             claim: str | None = None, clock: Clock | None = None,
             durability: str = "full") -> DatabaseBundle:
        if rows.read_document(run_id, "manifest") is None:
            raise NotFoundError(f"no run '{run_id}' in the database; `wfrun runs` lists runs")
        bundle = cls(rows, run_id, logs_root, fence, claim, clock, durability)
        if rows.bundle_sealed(run_id):
            bundle._sealed = True
        else:
            try:
                if bundle.read_manifest().get("status") in ENDED:
                    bundle._sealed = True
            except OperationFailed:
                pass
        return bundle

    def close(self) -> None:
        """Send what is still held (a parked run's state, an ending cut short); nothing
        else is open. A held write refused now is dropped: the run is let go."""
        if self._create:  # never begun (no `run_started`): leave no row at all
            self._drop()
            self._create = False
        if self._docs or self._events:
            try:
                self._flush()
            except (ClaimLost, OperationFailed, NotFoundError):
                self._drop()
        self._remove_live_folder()

    def _remove_live_folder(self) -> None:
        """The run's live-log folder on this host, once nothing runs in it: each live
        log is removed when its attempt ends, so an empty folder is all that is left
        (a run parked or ended). Only empty folders go: rmdir, never a tree."""
        folder = self.logs_root / self.run_id
        for path in (folder / LOGS, folder):
            try:
                path.rmdir()
            except OSError:  # not there, or not empty: someone still writes in it
                return

    # -- writes -----------------------------------------------------------------
    def _check(self) -> None:
        if self._sealed:
            raise OperationFailed(f"run '{self.run_id}' has ended; its bundle is immutable")
        # A claimed writer's fence is the write's own transaction (the launch row is
        # checked in it), so the caller's fence would only repeat it a round trip early.
        if self.claim is None and not self._fence():
            raise ClaimLost(f"lost the claim on run '{self.run_id}'; another runner owns it")

    def _patiently(self, write: Callable[[], str], done: set[str] | None = None,
                   landed: Callable[[], bool] | None = None,
                   maybe: tuple[str, ...] = ("exists",)) -> str:
        """`write()` until the database answers; after an `unavailable`, an answer in
        `done` (or one in `maybe` and `landed()`) means the earlier try had committed."""
        give_up = self.clock.monotonic() + self.patience
        retried = False
        while True:
            result = write()
            if result != "unavailable":
                if retried and (result in (done or set()) or (
                        result in maybe and landed is not None and landed())):
                    return "ok"
                return result
            if self.clock.monotonic() >= give_up:
                raise ClaimLost(f"cannot reach the database holding run '{self.run_id}'; "
                                "letting go of it (a host that reaches it resumes the run)")
            retried = True
            self.clock.sleep(RETRY_EVERY)

    def _write(self, write: Callable[[], str], done: set[str] | None = None) -> None:
        self._result(self._patiently(write, done))

    # -- batches ------------------------------------------------------------------
    def _hold(self, *, events: list[tuple[int, str]] | None = None,
              doc: tuple[str, str] | None = None, durable: bool = False) -> None:
        self._events.extend(events or ())
        if doc is not None:
            self._docs[doc[0]] = doc[1]
        self._durable = self._durable or durable

    def _drop(self) -> None:
        self._docs, self._events, self._durable, self._ending = {}, [], False, False

    def _flush(self, *, seal: bool = False, ending: LaunchStep | None = None) -> None:
        """Everything held (and the seal) in one transaction; with the launch's
        `running` when it creates the row, or with `ending` (the launch's) when given."""
        events, docs = list(self._events), list(self._docs.items())
        durable = (self._durable or seal) and self.sync
        create = self._create
        self._drop()
        if not events and not docs and not seal and not create:
            return
        launch = ending
        if create and self.begin is not None:
            launch = self.begin()  # then an ending is recorded apart (rare)

        def landed() -> bool:  # an earlier try committed this very batch
            if not events:
                return True
            have = self.rows.read_events(self.run_id, events[0][0] - 1)[:len(events)]
            return have == [text for _, text in events]

        result = self._patiently(
            lambda: self.rows.write_batch(self.run_id, self.claim, events=events,
                                          documents=docs, seal=seal, durable=durable,
                                          create=create, launch=launch),
            {"sealed"} if seal else set(), landed=landed,
            # A transition whose first try committed refuses its retry by its guard.
            maybe=("exists",) if launch is None else ("exists", "fenced"))
        if create and result == "exists":  # not our earlier try (`landed` said so)
            raise OperationFailed(f"run '{self.run_id}' already exists")
        self._create = False
        self._result(result)

    def _result(self, result: str) -> None:
        if result == "ok":
            return
        if result == "fenced":
            raise ClaimLost(f"lost the claim on run '{self.run_id}'; another runner owns it")
        if result == "sealed":
            self._sealed = True
            raise OperationFailed(f"run '{self.run_id}' has ended; its bundle is immutable")
        if result == "exists":
            raise ClaimLost(f"run '{self.run_id}' was written by another runner; letting go")
        raise NotFoundError(f"run '{self.run_id}' is not in the database (removed?)")

    def append(self, events: Iterable[dict[str, Any]], *, sync: bool) -> None:
        self._check()
        batch = list(events)
        if not batch:
            return
        rows = [(int(e["seq"]), self._json.line(e)) for e in batch]
        if any(e.get("type") in ENDINGS for e in batch):
            if self._create and self.begin is not None:
                self._flush()  # the row and the launch's `running` before the ending
            self._ending = True  # held until the seal: the ending is one transaction
        self._hold(events=rows, durable=sync)
        if self._ending:
            return
        if self._create and self.begin is not None and all(
                e.get("type") == "run_started" for e in batch):
            return  # the first write waits for the first node's start (module doc)
        self._flush()

    def replace_state(self, state: dict[str, Any]) -> None:
        self._check()
        # A projection of the trace: goes with the next write (a parked run's, with `close`)
        self._hold(doc=("state", self._json.dumps(state)))

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self._check()
        text = json.dumps(manifest, indent=2, sort_keys=True)
        self._hold(doc=("manifest", text), durable=True)
        if not self._ending and not self._create:  # the first waits for `run_started`
            self._flush()
        self._manifest = text  # the run's claim makes this writer its only one

    def write_workflow(self, snapshot: str) -> None:
        self._check()
        self._hold(doc=("workflow", snapshot))  # durable with the manifest after it

    def write_artifact(self, data: bytes, media_type: str) -> dict[str, Any]:
        self._check()
        digest = hashlib.sha256(data).hexdigest()
        self._flush()  # what is held was written first
        self._write(lambda: self.rows.put_artifact(self.run_id, digest, data, self.claim))
        return {"path": f"{ARTIFACTS}/sha256-{digest}.txt", "media_type": media_type,
                "bytes": len(data), "sha256": digest}

    def read_artifact(self, ref: dict[str, Any]) -> bytes:
        return read_artifact(self.rows, self.run_id, ref)

    def live_logs(self) -> Path:
        self._check()
        self._flush()
        path = self.logs_root / self.run_id / LOGS
        private_dirs(path)
        return path

    def start_launch(self) -> bool:
        """Nothing now: the first node's start carries the launch's `running`."""
        return True

    def write_whole(self, crash: Callable[[str], None] | None = None) -> None:
        """Nothing: rows already write a run in its launch's two transitions."""

    def write_held(self) -> None:
        """Nothing is held for the ending (`write_whole`)."""

    def repair(self) -> int:
        """A transaction commits whole: there is never a torn tail."""
        self._check()
        return 0

    def truncate_to(self, seq: int) -> None:
        self._check()
        self._flush()
        self._write(lambda: self.rows.truncate_events(self.run_id, seq, self.claim))

    def seal(self, ending: LaunchStep | None = None) -> None:
        """Seal with the ending's event, state and manifest, and with `ending` (the
        launch's transition recording how the run ended) when given one."""
        self._check()
        self._flush(seal=True, ending=ending)
        self._sealed = True

    # -- reads ------------------------------------------------------------------
    def read_trace(self) -> list[dict[str, Any]]:
        if not self._sealed and (self._events or self._docs):
            self._flush()  # the writer reads what it wrote
        return read_trace(self.rows, self.run_id).events

    def read_manifest(self) -> dict[str, Any]:
        if self._manifest is not None:  # closing a run reads no row to update its status
            value: dict[str, Any] = json.loads(self._manifest)
            return value
        return read_document(self.rows, self.run_id, "manifest")


def parse_events(texts: list[str], first_seq: int = 1) -> TraceRead:
    """The events of consecutive rows from `first_seq` (a gap or a bad row ends it)."""
    events: list[dict[str, Any]] = []
    size = 0
    for text in texts:
        try:
            event = json.loads(text)
        except ValueError:
            break
        if not isinstance(event, dict) or event.get("seq") != len(events) + first_seq:
            break
        events.append(event)
        size += len(text.encode()) + 1  # a trace line's bytes, as in a folder
    return TraceRead(events, size, len(events) != len(texts))


def read_trace(rows: BundleRows, run_id: str) -> TraceRead:
    return parse_events(rows.read_events(run_id))


def read_document(rows: BundleRows, run_id: str, kind: str) -> dict[str, Any]:
    text = rows.read_document(run_id, kind)
    if text is None:
        raise NotFoundError(f"run '{run_id}' has no {kind} in the database")
    return parse_document(run_id, kind, text)


def parse_document(run_id: str, kind: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        raise OperationFailed(f"run '{run_id}' has a damaged {kind}") from None
    if not isinstance(value, dict):
        raise OperationFailed(f"run '{run_id}' has a damaged {kind}")
    return value


def read_artifact(rows: BundleRows, run_id: str, ref: dict[str, Any]) -> bytes:
    rel = str(ref.get("path", ""))
    prefix = f"{ARTIFACTS}/sha256-"
    digest = rel[len(prefix):].removesuffix(".txt") if rel.startswith(prefix) else ""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise OperationFailed(f"invalid artifact reference {rel!r}")
    data = rows.read_artifact(run_id, digest)
    if data is None:
        raise FileNotFoundError(rel)
    return data
