"""The rows protocol: what a database must offer to hold run bundles (DESIGN §4).

`DatabaseBundle` (engine/_dbbundle.py) writes a run through these calls; the store's
Postgres backend implements them (runner/store/postgres/_bundles.py) without
importing the engine (structural typing), and `MemoryRows` here is the public
in-memory fake the engine's own tests run against.

Every write names the run and the writer's claim token. A write with a claim
succeeds only while the launch row of that run holds exactly that token, is
claimed (`starting` or `running`) and its lease has not expired, checked in the
same transaction as the write: a fenced-out host writes nothing. `claim=None`
is an unfenced write (an ending recorded by whoever holds the launch, or a
run outside the launch queue), as `always` is for a folder.

Write results are one word: `ok`, `fenced` (the claim is not held), `sealed`
(the run has ended; its bundle is immutable), `missing` (no such bundle),
`exists` (create: the run id is taken) or `unavailable` (the database could not
be reached; the write may or may not have committed, and the caller retries).
Trace events are the canonical JSON text of each event, keyed by run id and
`seq`; a second event with a taken `seq` is refused as `exists`, so two writers
can never interleave a trace.

`durable=False` is a write a folder would not fsync (`node_started`, the state
projection, the workflow snapshot): the database may commit it without waiting
for its log flush. A crash can then lose only a suffix of such writes, never one
that a durable write after it depends on (the log is flushed in order).

`write_batch` is several of these writes in one transaction, in this order:
events, documents, seal; all or nothing (`exists` if any event's seq is taken).
The writer sends a batch where the folder would make several writes with no
side effect between them (the documents a folder would not fsync go with the
next write; a run's ending event, state, manifest and seal go together).

`launch` joins a batch to the run's launch row: a `LaunchStep` is a transition of
the launch (made by the launch layer, which holds the claim) that runs the batch
inside its own transaction, so the run's first write and the launch's `running`,
and the run's seal and the launch's ending, are each one commit (`LaunchLink`,
engine/_runner.py, hands the steps to the bundle). The transition's guard on the launch row is then
the batch's fence.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

#: The per-run documents besides the trace.
DOCUMENTS = ("manifest", "workflow", "state")


class LaunchStep(Protocol):
    """A launch transition that runs a bundle write in its transaction: `run(write)`
    calls `write(tx)` under the launch row's lock and answers with the write's word;
    `fenced` when the transition's guard refused (nothing was written). `run(None)`:
    the bundle was written apart (a folder), the transition commits on its own."""

    def run(self, write: Callable[[Any], str] | None) -> str: ...


#: One bundle's manifest (None: not written yet) and trace rows, read with others'.
BundleRead = tuple[str | None, list[str]]


class BundleRows(Protocol):
    """Run bundles as rows. Every method is one transaction."""

    def create_bundle(self, run_id: str, claim: str | None) -> str: ...
    def append_events(self, run_id: str, events: Sequence[tuple[int, str]],
                      claim: str | None, durable: bool = True) -> str: ...
    def put_document(self, run_id: str, kind: str, text: str, claim: str | None,
                     durable: bool = True) -> str: ...
    def put_artifact(self, run_id: str, sha256: str, data: bytes, claim: str | None) -> str: ...
    def truncate_events(self, run_id: str, after_seq: int, claim: str | None) -> str: ...
    def seal_bundle(self, run_id: str, claim: str | None) -> str: ...
    def write_batch(self, run_id: str, claim: str | None, *,
                    events: Sequence[tuple[int, str]] = (),
                    documents: Sequence[tuple[str, str]] = (), seal: bool = False,
                    durable: bool = True, create: bool = False,
                    launch: LaunchStep | None = None) -> str: ...

    def bundle_exists(self, run_id: str) -> bool: ...
    def bundle_sealed(self, run_id: str) -> bool: ...
    def read_events(self, run_id: str, after_seq: int = 0) -> list[str]: ...
    def first_event(self, run_id: str) -> str | None: ...
    def read_document(self, run_id: str, kind: str) -> str | None: ...
    def read_artifact(self, run_id: str, sha256: str) -> bytes | None: ...
    def bundle_ids(self) -> list[str]: ...
    def read_bundles(self, run_ids: Sequence[str]) -> dict[str, BundleRead]:
        """The manifests and traces of those of `run_ids` that exist, in two statements
        (a run list reads a page of bundles: not four statements per run)."""
        ...
    def remove_bundle(self, run_id: str, *, unstarted_only: bool) -> bool: ...

    # Continuation markers: a waiting run continues once (`wfrun answer`).
    def mark_continued(self, parent_run_id: str) -> bool: ...
    def set_continued(self, parent_run_id: str, child_run_id: str) -> None: ...
    def unmark_continued(self, parent_run_id: str, child_run_id: str) -> None: ...
    def continued_by(self, parent_run_id: str) -> str | None: ...


@dataclass
class _Bundle:
    events: dict[int, str] = field(default_factory=dict)
    documents: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, bytes] = field(default_factory=dict)
    sealed: bool = False


class MemoryRows:
    """`BundleRows` in memory, for tests: the same answers as the database.

    `holds(run_id, claim)` plays the launch row: by default every claim is held;
    a test fences a writer out with `revoke(claim)`.
    """

    def __init__(self, holds: Callable[[str, str], bool] | None = None) -> None:
        self._bundles: dict[str, _Bundle] = {}
        self._continued: dict[str, str] = {}
        self._revoked: set[str] = set()
        # The next `outages` writes answer `unavailable` (a database restart, for tests),
        # after committing when `commit_then_fail` (the answer lost with the connection).
        self.outages = 0
        self.commit_then_fail = False
        self._holds = holds
        self._lock = threading.Lock()
        self.writes = 0  # transactions that changed something (tests count them)

    def revoke(self, claim: str) -> None:
        self._revoked.add(claim)

    def _faulty(self, write: Callable[..., str], *args: object) -> str:
        if self.outages <= 0:
            return write(*args)
        self.outages -= 1
        if self.commit_then_fail:
            write(*args)
        return "unavailable"

    def _fenced(self, run_id: str, claim: str | None) -> bool:
        if claim is None:
            return False
        if claim in self._revoked:
            return True
        return self._holds is not None and not self._holds(run_id, claim)

    def _writable(self, run_id: str, claim: str | None) -> tuple[str, _Bundle | None]:
        if self._fenced(run_id, claim):
            return "fenced", None
        bundle = self._bundles.get(run_id)
        if bundle is None:
            return "missing", None
        if bundle.sealed:
            return "sealed", None
        return "ok", bundle

    # -- writes ----------------------------------------------------------------
    def _create_bundle(self, run_id: str, claim: str | None) -> str:
        with self._lock:
            if self._fenced(run_id, claim):
                return "fenced"
            if run_id in self._bundles:
                return "exists"
            self._bundles[run_id] = _Bundle()
            self.writes += 1
            return "ok"

    def _append_events(self, run_id: str, events: Sequence[tuple[int, str]],
                      claim: str | None) -> str:
        with self._lock:
            result, bundle = self._writable(run_id, claim)
            if bundle is None:
                return result
            if any(seq in bundle.events for seq, _ in events):
                return "exists"
            bundle.events.update(events)
            self.writes += 1
            return "ok"

    def _put_document(self, run_id: str, kind: str, text: str, claim: str | None) -> str:
        if kind not in DOCUMENTS:
            raise ValueError(f"unknown bundle document {kind!r}")
        with self._lock:
            result, bundle = self._writable(run_id, claim)
            if bundle is None:
                return result
            bundle.documents[kind] = text
            self.writes += 1
            return "ok"

    def _put_artifact(self, run_id: str, sha256: str, data: bytes, claim: str | None) -> str:
        with self._lock:
            result, bundle = self._writable(run_id, claim)
            if bundle is None:
                return result
            bundle.artifacts.setdefault(sha256, bytes(data))
            self.writes += 1
            return "ok"

    def _truncate_events(self, run_id: str, after_seq: int, claim: str | None) -> str:
        with self._lock:
            result, bundle = self._writable(run_id, claim)
            if bundle is None:
                return result
            for seq in [s for s in bundle.events if s > after_seq]:
                del bundle.events[seq]
            self.writes += 1
            return "ok"

    def _seal_bundle(self, run_id: str, claim: str | None) -> str:
        with self._lock:
            result, bundle = self._writable(run_id, claim)
            if bundle is None:
                return result
            bundle.sealed = True
            self.writes += 1
            return "ok"

    def _write_batch(self, run_id: str, claim: str | None,
                     events: Sequence[tuple[int, str]], documents: Sequence[tuple[str, str]],
                     seal: bool, create: bool) -> str:
        if any(kind not in DOCUMENTS for kind, _ in documents):
            raise ValueError(f"unknown bundle document in {[k for k, _ in documents]!r}")
        with self._lock:
            if create:  # the bundle's row first, in the same transaction
                if self._fenced(run_id, claim):
                    return "fenced"
                if run_id in self._bundles:
                    return "exists"
                self._bundles[run_id] = _Bundle()
            result, bundle = self._writable(run_id, claim)
            if bundle is None:
                return result
            if any(seq in bundle.events for seq, _ in events):
                return "exists"
            bundle.events.update(events)
            bundle.documents.update(documents)
            bundle.sealed = bundle.sealed or seal
            self.writes += 1
            return "ok"

    def create_bundle(self, run_id: str, claim: str | None) -> str:
        return self._faulty(self._create_bundle, run_id, claim)

    def write_batch(self, run_id: str, claim: str | None, *,
                    events: Sequence[tuple[int, str]] = (),
                    documents: Sequence[tuple[str, str]] = (), seal: bool = False,
                    durable: bool = True, create: bool = False,
                    launch: LaunchStep | None = None) -> str:
        if launch is not None:  # the transition's guard fences the batch
            return self._faulty(lambda: launch.run(lambda _tx: self._write_batch(
                run_id, None, events, documents, seal, create)))
        return self._faulty(self._write_batch, run_id, claim, events, documents, seal, create)

    def append_events(self, run_id: str, events: Sequence[tuple[int, str]],
                      claim: str | None, durable: bool = True) -> str:
        return self._faulty(self._append_events, run_id, events, claim)

    def put_document(self, run_id: str, kind: str, text: str, claim: str | None,
                     durable: bool = True) -> str:
        return self._faulty(self._put_document, run_id, kind, text, claim)

    def put_artifact(self, run_id: str, sha256: str, data: bytes, claim: str | None) -> str:
        return self._faulty(self._put_artifact, run_id, sha256, data, claim)

    def truncate_events(self, run_id: str, after_seq: int, claim: str | None) -> str:
        return self._faulty(self._truncate_events, run_id, after_seq, claim)

    def seal_bundle(self, run_id: str, claim: str | None) -> str:
        return self._faulty(self._seal_bundle, run_id, claim)

    # -- reads -----------------------------------------------------------------
    def bundle_exists(self, run_id: str) -> bool:
        return run_id in self._bundles

    def bundle_sealed(self, run_id: str) -> bool:
        bundle = self._bundles.get(run_id)
        return bundle is not None and bundle.sealed

    def read_events(self, run_id: str, after_seq: int = 0) -> list[str]:
        with self._lock:
            bundle = self._bundles.get(run_id)
            if bundle is None:
                return []
            return [bundle.events[s] for s in sorted(bundle.events) if s > after_seq]

    def first_event(self, run_id: str) -> str | None:
        bundle = self._bundles.get(run_id)
        return None if bundle is None else bundle.events.get(1)

    def read_document(self, run_id: str, kind: str) -> str | None:
        bundle = self._bundles.get(run_id)
        return None if bundle is None else bundle.documents.get(kind)

    def read_artifact(self, run_id: str, sha256: str) -> bytes | None:
        bundle = self._bundles.get(run_id)
        return None if bundle is None else bundle.artifacts.get(sha256)

    def bundle_ids(self) -> list[str]:
        return sorted(self._bundles)

    def read_bundles(self, run_ids: Sequence[str]) -> dict[str, BundleRead]:
        with self._lock:
            return {r: (b.documents.get("manifest"), [b.events[s] for s in sorted(b.events)])
                    for r in run_ids if (b := self._bundles.get(r)) is not None}

    def remove_bundle(self, run_id: str, *, unstarted_only: bool) -> bool:
        with self._lock:
            bundle = self._bundles.get(run_id)
            if bundle is None or (unstarted_only and 1 in bundle.events):
                return False
            del self._bundles[run_id]
            if not unstarted_only:
                self._continued.pop(run_id, None)  # its marker goes with it (`prune`)
            return True

    # -- continuation markers --------------------------------------------------
    def mark_continued(self, parent_run_id: str) -> bool:
        with self._lock:
            if parent_run_id in self._continued:
                return False
            self._continued[parent_run_id] = ""
            return True

    def set_continued(self, parent_run_id: str, child_run_id: str) -> None:
        with self._lock:
            self._continued[parent_run_id] = child_run_id

    def unmark_continued(self, parent_run_id: str, child_run_id: str) -> None:
        with self._lock:
            if self._continued.get(parent_run_id) in ("", child_run_id):
                del self._continued[parent_run_id]

    def continued_by(self, parent_run_id: str) -> str | None:
        return self._continued.get(parent_run_id)
