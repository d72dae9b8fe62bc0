"""A host's item worker (ADR 0008 phase 2): items of shared fan-out nodes of any run.

A host with a free slot and no launch to claim claims items of shared node visits
(shell bodies of runs no session owns), whoever holds their parent run. Its claim
holds an item lease, not the parent: the store counts every live holder's items
against the node's `max_concurrency` in the transaction that claims, and a row left
`running` by a dead host is taken over once its lease runs out (its start counted;
a third start is refused, as for any item). One renewal thread keeps this host's
leases; an item it no longer holds (the parent cancelled it, fail_fast, another
holder took it over) or whose parent ended is stopped at the next renewal.

A slot also holds one item claimed ahead (ADR 0014) while it runs one, its claim and
start durable since the commit that took it: when the slot's item ends, the slot
starts that one at once and settles the ended one beside it (a small pool of
settlers), in the commit that makes the started item its own and claims the next
ahead. The commit and the WAL's flush (~1 ms here) then overlap an item instead of
standing between two.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from runner._leases import renew_every
from runner.clock import Clock
from runner.compiler import WorkflowDefinition
from runner.engine import RunControl
from runner.engine._itemhost import ItemHost, open_item_host
from runner.engine._items import ITEM_ENDS, ItemEnd
from runner.errors import WfrunError
from runner.store import Store, StoreError
from runner.store.domain._fanout import HOST_TOKEN, Handed, HostClaim, ItemKey, ItemLog

from ._activation import CrashPoints
from ._engines import Engines
from ._items import _endings
from ._queue import Resolver

log = logging.getLogger(__name__)

#: Where tests kill a host's item worker (the fault harness), in the order it passes them.
HOST_ITEM_POINTS = ("after_host_item_claimed", "before_host_item_settled")
#: Seconds between renewals at most: also how soon a cancelled item is stopped.
CANCEL_POLL = 0.5
#: Node visits whose read state a host keeps (an ItemHost folds the parent's trace).
KEPT_HOSTS = 16
#: Threads that settle items beside the slots' next items (their commits take turns on
#: the store's write lock anyway; the flushes after them overlap).
SETTLERS = 4


@dataclass(frozen=True, slots=True)
class _Ran:
    """How a slot's item ended: `end` None when it was parked or skipped."""

    outcome: str
    end: ItemEnd | None = None
    logs: tuple[ItemLog, ...] = ()


class ItemWork(Protocol):
    """What a host's claim loop uses of its item worker."""

    def claim(self, want: int) -> list[HostClaim]: ...

    def run(self, claim: HostClaim, control: RunControl) -> str: ...

    def close(self) -> None: ...


class HostItems:
    """One host's (or worker process's) item worker over one store."""

    def __init__(self, store: Store, engines: Engines, resolver: Resolver, clock: Clock, *,
                 runner_id: str, lease_seconds: float,
                 crash: CrashPoints | None = None) -> None:
        self._fanout = store.fanout
        self._crash = crash or CrashPoints()
        self._engines = engines
        self._resolver = resolver
        self._clock = clock
        self.holder = f"{HOST_TOKEN}{runner_id}:{uuid.uuid4().hex[:12]}"
        self._every = min(renew_every(lease_seconds), CANCEL_POLL)
        self._lock = threading.Lock()
        # One slot at a time reads a visit's parent run (the others wait for its read:
        # a host's 16 slots claiming a new visit at once each folded the trace).
        self._opening = threading.Lock()
        self._hosts: OrderedDict[ItemKey, ItemHost | str] = OrderedDict()
        self._controls: dict[tuple[ItemKey, int], RunControl] = {}
        self._skip: set[ItemKey] = set()  # visits this host cannot run (the parent's will)
        self._ahead: set[tuple[ItemKey, int]] = set()  # claimed ahead, renewed with the rest
        self._settlers: ThreadPoolExecutor | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- the claim loop's side ------------------------------------------------------------
    def claim(self, want: int) -> list[HostClaim]:
        """Claim up to `want` items (none when the store refuses: the loop goes on)."""
        if want <= 0:
            return []
        try:
            with self._lock:
                skip = frozenset(self._skip)
            return self._fanout.claim_for_host(self.holder, want, skip=skip)
        except StoreError as exc:
            log.debug("item claims wait for the store: %s", exc.message)
            return []

    def run(self, claim: HostClaim, control: RunControl) -> str:
        """Run a claimed item to its end and settle it, then the items its settles claim
        for the same slot (one commit each hands the slot on), until none is left or the
        slot is stopped; returns how the last one ended (`parked`: given back;
        `skipped`: this host cannot run the node). With an item claimed ahead, the next
        one starts first and the ended one is settled beside it (module doc)."""
        current: HostClaim | None = claim
        ahead: HostClaim | None = None
        beside: Future[Handed | None] | None = None  # the settle under way next to `current`
        outcome = "skipped"
        while current is not None:
            ran = self._run_one(current, control)
            outcome = ran.outcome
            if beside is not None:
                handed, beside = beside.result(), None
                ahead = self._taken_ahead(handed)
            if ran.end is None:  # parked or skipped: what is claimed ahead goes back too
                self._give_back(ahead)
                return outcome
            if ahead is not None and not control.stopping and self._holds(ahead):
                with self._lock:  # registered first: a refused promotion stops it
                    self._controls[(ahead.key, ahead.index)] = control
                    self._ahead.discard((ahead.key, ahead.index))
                beside = self._settle_pool().submit(self._settle, current, ran, control,
                                                    ahead)
                current, ahead = ahead, None
                continue
            self._give_back(ahead)  # cancelled meanwhile (a no-op), or the slot stops
            handed = self._settle(current, ran, control, None)
            current = handed.claimed[0] if handed is not None and handed.claimed else None
            ahead = self._taken_ahead(handed)
        return outcome

    def _run_one(self, claim: HostClaim, control: RunControl) -> _Ran:
        key, index = claim.key, claim.index
        if self._crash.hook is not None:
            self._crash.hook("after_host_item_claimed")
        host = self._host(key)
        if isinstance(host, str):
            log.warning("wfrun host: run %s: cannot run the items of %s here (%s); its "
                        "runner runs them", key.run_id, key.node_id, host)
            self._release(key, index)
            try:
                self._fanout.refuse(key)
            except StoreError as exc:
                log.debug("refusing %s[%s] waits for the store: %s", key.node_id, index,
                          exc.message)
            return _Ran("skipped")
        with self._lock:
            self._controls[(key, index)] = control
        self._ensure_renewer()
        try:
            end = host.run(index, control)
        finally:
            with self._lock:
                self._controls.pop((key, index), None)
        if end is None:
            host.take_logs(index)  # it runs again: its next run's logs are the ones kept
            if control.clean:
                self._release(key, index)  # stopped, not dead: the start is not counted
            return _Ran("parked")
        logs = tuple(ItemLog(index, attempt, json.dumps(log, separators=(",", ":"),
                                                        ensure_ascii=False))
                     for attempt, log in host.take_logs(index))
        return _Ran(end.outcome, end, logs)

    def _settle(self, claim: HostClaim, ran: _Ran, control: RunControl,
                started: HostClaim | None) -> Handed | None:
        """Record the ended item (and its logs) and hand the slot on in one commit:
        `started`, the item claimed ahead that the slot has just started, becomes its
        own (else one more item is claimed to run next), and one more is claimed ahead
        unless the slot stops. None when the store refused (the item's lease runs out;
        another holder runs it again)."""
        key, index = claim.key, claim.index
        if self._crash.hook is not None:
            self._crash.hook("before_host_item_settled")
        if ran.end is None:
            return None
        stopping = control.stopping
        try:
            handed = self._fanout.hand_on(
                key, _endings([ran.end]), holder=self.holder, logs=ran.logs,
                want=0 if stopping or started is not None else 1,
                ahead=0 if stopping else 1,
                promote=None if started is None else started.index)
        except StoreError as exc:
            log.warning("wfrun host: cannot record item %s[%s]: %s", key.node_id, index,
                        exc.message)
            return None
        if handed.recorded:  # a parent waiting here for its last items looks now
            ITEM_ENDS.ended(key.run_id, key.node_id, key.visit)
        with self._lock:
            self._ahead.update((a.key, a.index) for a in handed.ahead)
            if started is not None and not handed.promoted \
                    and self._controls.get((started.key, started.index)) is control:
                control.cancel(f"item {started.key.node_id}[{started.index}] was cancelled "
                               "(or its run ended, or another holder took it over)")
        return handed

    def _holds(self, ahead: HostClaim) -> bool:
        """Whether the slot still holds its item claimed ahead (a look in the store just
        before it starts it: one cancelled since is not started). A store that does not
        answer: not started (the sync settle that follows says what is left)."""
        try:
            return self._fanout.holds_ahead(ahead, self.holder)
        except StoreError as exc:
            log.debug("item %s[%s] claimed ahead waits for the store: %s",
                      ahead.key.node_id, ahead.index, exc.message)
            return False

    def _taken_ahead(self, handed: Handed | None) -> HostClaim | None:
        """The item a settle claimed ahead for the slot, if any: from here the slot
        starts it or gives it back (it stays renewed until then)."""
        return handed.ahead[0] if handed is not None and handed.ahead else None

    def _give_back(self, claim: HostClaim | None) -> None:
        """An item claimed ahead that the slot will not start: `pending` again, its start
        uncounted (one cancelled or taken over meanwhile is left alone)."""
        if claim is None:
            return
        with self._lock:
            self._ahead.discard((claim.key, claim.index))
        self._release(claim.key, claim.index)

    def _settle_pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._settlers is None:
                self._settlers = ThreadPoolExecutor(SETTLERS,
                                                    thread_name_prefix="wfrun-item-settle")
            return self._settlers

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            settlers, self._settlers = self._settlers, None
        if settlers is not None:
            settlers.shutdown(wait=True)
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        with self._lock:
            hosts = [h for h in self._hosts.values() if isinstance(h, ItemHost)]
            self._hosts.clear()
        for host in hosts:
            host.close()

    # -- internals ------------------------------------------------------------------------
    def _release(self, key: ItemKey, index: int) -> None:
        try:
            self._fanout.release_held(key, [index], holder=self.holder)
        except StoreError as exc:
            log.debug("item %s[%s] left to its lease: %s", key.node_id, index, exc.message)

    def _host(self, key: ItemKey) -> ItemHost | str:
        host = self._kept(key)
        if host is not None:
            return host
        with self._opening:
            host = self._kept(key)  # another slot read it while this one waited
            return host if host is not None else self._open(key)

    def _kept(self, key: ItemKey) -> ItemHost | str | None:
        with self._lock:
            host = self._hosts.get(key)
            if host is not None:
                self._hosts.move_to_end(key)
            return host

    def _open(self, key: ItemKey) -> ItemHost | str:
        # Counted in SQL: the rows themselves (a 1,000-item map's) were ~5 ms of the
        # first slot's way to its first item, while the other slots waited for it.
        count = sum(self._fanout.progress(key.run_id).get((key.node_id, key.visit),
                                                          {}).values())

        def resolve(manifest: dict[str, object]) -> WorkflowDefinition:
            definition, _ = self._resolver.compile(str(manifest.get("workflow_ref")))
            return definition

        try:
            made: ItemHost | str = open_item_host(self._engines.reading(key.run_id),
                                                  key.run_id, key.node_id, key.visit, count,
                                                  resolve)
        except (WfrunError, OSError, ValueError) as exc:
            made = f"{type(exc).__name__}: {exc}"[:300]
        with self._lock:
            if isinstance(made, str):
                self._skip.add(key)
            self._hosts[key] = made
            while len(self._hosts) > KEPT_HOSTS:
                _, old = self._hosts.popitem(last=False)
                if isinstance(old, ItemHost):
                    old.close()
        return made

    def _ensure_renewer(self) -> None:
        with self._lock:
            if self._renewer is not None:
                return
            self._renewer = threading.Thread(target=self._renew_loop, daemon=True,
                                             name="wfrun-item-leases")
            self._renewer.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self._every):  # real time, as the host's own polls
            with self._lock:
                running = dict(self._controls)
                ahead = set(self._ahead)
            if running or ahead:
                self.renew(running, ahead)

    def renew(self, running: dict[tuple[ItemKey, int], RunControl],
              ahead: set[tuple[ItemKey, int]] | None = None) -> None:
        """Renew this holder's leases and stop each item of `running` (a snapshot of
        the items running here) that it no longer holds; `ahead`: items claimed ahead
        for its slots, renewed as well (one no longer held is not started)."""
        try:
            held = self._fanout.renew_held(self.holder, {*running, *(ahead or ())})
        except StoreError as exc:
            log.debug("item leases wait for the store: %s", exc.message)
            return
        if ahead:
            with self._lock:
                self._ahead -= ahead - held
        for (key, index), control in running.items():
            if (key, index) in held or control.stopping:
                continue
            with self._lock:
                # An item that ended since the snapshot was settled (so not held), and
                # its slot's control may run the slot's next item now: only an item
                # still running here is stopped (under the lock its end takes).
                if self._controls.get((key, index)) is control:
                    control.cancel(f"item {key.node_id}[{index}] was cancelled (or its run "
                                   "ended, or another holder took it over)")
