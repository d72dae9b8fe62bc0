"""A trigger's slots: which instants a `cron` or `every` schedule names (DESIGN §10).

- cron slots are wall-clock times in the trigger's time zone, by cronsim (Debian
  cron's rules). A fixed time the clocks skip in spring (`30 2 * * *`) fires at
  the first minute after the gap, once; a fixed time repeated in autumn fires once,
  at its first occurrence. A schedule with a wildcard hour follows real hours: an
  hourly cron has no slot in the skipped hour and one in each occurrence of the
  repeated hour (23 and 25 slots on those days). The slot's key is its UTC instant.
- `every` slots are multiples of the period since the Unix epoch, the same on every
  host, so they are counted by arithmetic, never listed.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from runner.clock import compact_utc
from runner.compiler._triggers import TriggerSpec

#: At most this many missed slots are launched by one evaluation (`missed: all`
#: after a long outage of a fast schedule); older ones are recorded as missed.
MAX_CATCH_UP = 1000
#: Slots counted one by one when recording a gap older than the catch-up window.
MAX_COUNTED = 100_000


def slot_key(slot: float) -> str:
    """The slot's part of the idempotency key: its UTC instant (unique across DST)."""
    return datetime.fromtimestamp(slot, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def firing_run_id(workflow: str, trigger: str, key: str, at: float) -> str:
    """A run id fixed by the firing (the queue's primary key backs the firing's)."""
    digest = hashlib.sha256(f"{workflow}\0{trigger}\0{key}".encode()).hexdigest()[:8]
    return f"{workflow}-{compact_utc(at)}-{digest}"


def slots_after(spec: TriggerSpec, after: float, until: float,
                limit: int = MAX_CATCH_UP + 1) -> list[float]:
    """The trigger's slots in (after, until], oldest first, at most `limit` (the first)."""
    out: list[float] = []
    if spec.every is not None:
        step = spec.every
        k = int(after // step) + 1
        while len(out) < limit:
            slot = k * step
            if slot > until:
                break
            if slot > after:
                out.append(slot)
            k += 1
        return out
    if spec.cron is None:
        return out
    from cronsim import CronSim

    zone = ZoneInfo(spec.timezone)
    for moment in CronSim(spec.cron, datetime.fromtimestamp(after, zone)):
        slot = moment.timestamp()
        if slot > until or len(out) >= limit:
            break
        if slot > after:
            out.append(slot)
    return out


def newest_slots(spec: TriggerSpec, after: float, until: float, keep: int
                 ) -> tuple[list[float], int]:
    """The newest `keep` slots in (after, until], oldest first, and how many older
    ones the range holds besides."""
    if spec.every is not None:
        last = int(until // spec.every)
        first = int(after // spec.every) + 1
        total = max(0, last - first + 1)
        steps = [k * spec.every for k in range(max(first, last - keep + 1), last + 1)]
        return steps, total - len(steps)
    kept: list[float] = []
    older = 0
    start = after
    while True:  # in chunks: a cron with seconds has 86,400 slots a day
        chunk = slots_after(spec, start, until, limit=MAX_COUNTED)
        kept.extend(chunk)
        if len(kept) > keep:
            older += len(kept) - keep
            kept = kept[-keep:]
        if len(chunk) < MAX_COUNTED:
            return kept, older
        start = chunk[-1]


def next_slot(spec: TriggerSpec, after: float) -> float | None:
    """The first slot after `after` (None: the schedule has no more)."""
    if spec.every is not None:
        return (int(after // spec.every) + 1) * spec.every
    found = slots_after(spec, after, after + 5 * 366 * 86_400, limit=1)
    return found[0] if found else None


def count_slots(spec: TriggerSpec, after: float, until: float) -> tuple[int, float | None]:
    """How many slots (after, until] holds (capped at MAX_COUNTED) and the last one."""
    if spec.every is not None:
        first = int(after // spec.every) + 1
        last = int(until // spec.every)
        return max(0, last - first + 1), (last * spec.every if last >= first else None)
    found = slots_after(spec, after, until, limit=MAX_COUNTED)
    return len(found), (found[-1] if found else None)
