"""runner._deadline: user code on a pooled thread, abandoned at its deadline or a stop."""

from __future__ import annotations

import threading

import pytest
from waiting import DEADLINE

from runner import _deadline as deadline
from runner._deadline import run_with_deadline
from runner.clock import FakeClock, SystemClock

REAL = SystemClock()


def test_a_call_that_returns_gives_its_value() -> None:
    call = run_with_deadline(lambda: 41 + 1, deadline=None, monotonic=REAL.monotonic)
    assert (call.ending, call.value, call.error) == ("returned", 42, None)


@pytest.mark.parametrize("exc", [ValueError("bad"), SystemExit(3), KeyboardInterrupt()])
def test_anything_a_call_raises_is_reported_not_raised(exc: BaseException) -> None:
    def boom() -> None:
        raise exc

    call = run_with_deadline(boom, deadline=None, monotonic=REAL.monotonic)
    assert call.ending == "raised"
    assert call.error is exc


def test_a_hung_call_is_abandoned_at_the_deadline_on_the_given_clock() -> None:
    clock = FakeClock()
    release = threading.Event()
    result: dict[str, object] = {}

    def wait_for_test() -> None:
        result["call"] = run_with_deadline(release.wait, deadline=clock.monotonic() + 5,
                                           monotonic=clock.monotonic, poll=0.005)

    waiter = threading.Thread(target=wait_for_test)
    waiter.start()
    try:
        waiter.join(0.2)
        assert waiter.is_alive()  # no virtual time passed: still waiting
        clock.advance(5)
        waiter.join(DEADLINE)
        assert not waiter.is_alive()
        call = result["call"]
        assert getattr(call, "ending", None) == "timed_out"
    finally:
        release.set()  # the abandoned thread finishes and rejoins the pool


def test_the_waiter_never_moves_the_clock() -> None:
    clock = FakeClock()
    before = clock.monotonic()
    gate = threading.Event()
    threading.Timer(0.1, gate.set).start()
    call = run_with_deadline(gate.wait, deadline=before + 1, monotonic=clock.monotonic,
                             poll=0.005)
    assert call.ending == "returned"
    assert clock.monotonic() == before


def test_a_stop_request_wins_over_the_deadline() -> None:
    release = threading.Event()
    try:
        call = run_with_deadline(release.wait, deadline=REAL.monotonic() - 1,
                                 monotonic=REAL.monotonic, stop=lambda: True)
        assert call.ending == "stopped"
    finally:
        release.set()


def test_a_stop_abandons_a_call_without_a_deadline() -> None:
    release, stop = threading.Event(), threading.Event()
    threading.Timer(0.05, stop.set).start()
    try:
        call = run_with_deadline(release.wait, deadline=None, monotonic=REAL.monotonic,
                                 stop=stop.is_set, poll=0.005)
        assert call.ending == "stopped"
    finally:
        release.set()


def test_threads_are_reused_and_an_abandoned_one_does_not_block_the_next_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A pool of its own: the process-wide one also holds the threads that earlier tests
    # abandoned, and one of those rejoining between the two calls (late, on a busy
    # machine) would be handed the second call (failed 1 of 4 busy CI runs).
    monkeypatch.setattr(deadline, "_POOL", deadline._Pool())
    first = run_with_deadline(threading.get_ident, deadline=None, monotonic=REAL.monotonic)
    second = run_with_deadline(threading.get_ident, deadline=None, monotonic=REAL.monotonic)
    assert first.value == second.value  # the same pooled thread
    hung = threading.Event()
    try:
        timed_out = run_with_deadline(hung.wait, deadline=REAL.monotonic() + 0.05,
                                      monotonic=REAL.monotonic)
        assert timed_out.ending == "timed_out"
        after = run_with_deadline(threading.get_ident, deadline=REAL.monotonic() + DEADLINE,
                                  monotonic=REAL.monotonic)
        assert after.ending == "returned"
    finally:
        hung.set()
