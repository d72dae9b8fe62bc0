"""Lanes (runner/controllers/_lanes.py): at most `count` workers run the manager's own
Python at once, a lane held across a user call that blocks is taken over, and
`Habits` tells controllers whose calls block from ones whose calls return at once.

Every wait is on an event or a counter the threads move, with DEADLINE only as the
bound of a broken run."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from waiting import DEADLINE, wait_until

from runner.controllers._lanes import LONGEST_LOOK, SLOW_CALL, Habits, Lanes


def _spawn(target: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


class Looks:
    """Makes the lanes' patience run out only when the test says so: each `look()` ends
    one patience wait of the waiting thread (as if it timed out) and returns once the
    waiter has looked at the lanes. Runs on the lanes' real condition and lock."""

    def __init__(self, lanes: Lanes) -> None:
        self.count = 0
        self.timeouts: list[float | None] = []  # what each wait was asked to wait
        self._step = threading.Semaphore(0)
        cond = lanes._cond

        def wait(timeout: float | None = None) -> bool:
            self.timeouts.append(timeout)
            cond.release()
            try:
                assert self._step.acquire(timeout=DEADLINE)
            finally:
                cond.acquire()
            self.count += 1
            return False  # "timed out"

        cond.wait = wait  # type: ignore[method-assign]

    def look(self) -> None:
        n = self.count
        self._step.release()
        wait_until(lambda: self.count > n, what="the waiter to look")

    def free_run(self) -> None:
        """Let the waiter's remaining waits end at once."""
        self._step.release(1000)


def test_no_more_than_count_threads_hold_a_lane_and_every_waiter_gets_one() -> None:
    lanes = Lanes(2, patience=0.001)
    guard = threading.Lock()
    inside: list[int] = []
    entered: list[int] = []
    most = [0]
    release = {i: threading.Event() for i in range(5)}

    def worker(i: int) -> None:
        lanes.enter()
        with guard:
            inside.append(i)
            entered.append(i)
            most[0] = max(most[0], len(inside))
        assert release[i].wait(DEADLINE)
        with guard:
            inside.remove(i)
        lanes.leave()

    threads = [_spawn(lambda i=i: worker(i)) for i in range(5)]
    for done in range(4):  # let one holder go at a time; a waiter takes its lane
        wait_until(lambda done=done: len(entered) == done + 2, what="a lane")
        with guard:
            holder = next(i for i in inside if not release[i].is_set())
        release[holder].set()
    for event in release.values():
        event.set()
    for t in threads:
        t.join(DEADLINE)
    assert most[0] == 2
    assert sorted(entered) == [0, 1, 2, 3, 4]
    assert lanes.takeovers == 0  # nobody was away: every lane was handed over by leave


def test_a_lane_held_in_a_blocked_user_call_is_taken_over_and_the_caller_queues_again(
        ) -> None:
    lanes = Lanes(1, patience=0.001)
    unblock = threading.Event()
    order: list[str] = []
    b_in = threading.Event()
    b_go = threading.Event()

    def a() -> None:
        lanes.enter()
        lanes.away()
        assert unblock.wait(DEADLINE)  # the "reconciler" blocks
        lanes.back()
        order.append("a back")
        lanes.leave()

    def b() -> None:
        lanes.enter()  # only possible by taking A's lane over
        order.append("b in")
        b_in.set()
        assert b_go.wait(DEADLINE)
        order.append("b out")
        lanes.leave()

    ta = _spawn(a)
    wait_until(lambda: lanes._away, what="A away")
    tb = _spawn(b)
    assert b_in.wait(DEADLINE)
    assert lanes.takeovers == 1
    unblock.set()  # A comes back while B holds the one lane: A waits for it
    b_go.set()
    ta.join(DEADLINE)
    tb.join(DEADLINE)
    assert order == ["b in", "b out", "a back"]


def test_a_holder_running_manager_code_is_never_taken_over() -> None:
    lanes = Lanes(1)
    looks = Looks(lanes)
    got = threading.Event()
    lanes.enter()  # this thread holds the lane, not away
    t = _spawn(lambda: (lanes.enter(), got.set(), lanes.leave()))
    for _ in range(5):
        looks.look()
    assert not got.is_set()
    assert lanes.takeovers == 0
    lanes.leave()
    looks.free_run()
    assert got.wait(DEADLINE)
    t.join(DEADLINE)


def test_a_user_call_is_taken_over_only_once_it_spans_a_whole_patience() -> None:
    # The waiter must see the *same* call at two looks one patience apart: calls that
    # return between its looks (no-op reconcilers) keep their lane.
    lanes = Lanes(1)
    looks = Looks(lanes)
    got = threading.Event()
    lanes.enter()
    t = _spawn(lambda: (lanes.enter(), got.set()))
    for _ in range(5):  # one short call per look: each look sees a different call
        lanes.away()
        looks.look()
        lanes.back()
    assert not got.is_set()
    assert lanes.takeovers == 0
    lanes.away()  # a call that spans two looks is taken over at the second
    looks.look()
    assert not got.is_set()
    looks.look()
    assert got.wait(DEADLINE)
    assert lanes.takeovers == 1
    looks.free_run()
    t.join(DEADLINE)


def test_the_watcher_looks_less_often_while_nobody_is_in_user_code() -> None:
    # CPU-bound passes: every look takes the GIL from them for nothing, so the waits
    # between looks double up to LONGEST_LOOK patiences, and shrink back to one
    # patience as soon as a look sees a user call.
    lanes = Lanes(1, patience=0.5)
    looks = Looks(lanes)
    got = threading.Event()
    lanes.enter()
    t = _spawn(lambda: (lanes.enter(), got.set(), lanes.leave()))
    for _ in range(6):
        looks.look()
    lanes.away()
    looks.look()  # the first look to see the call: the next one is a patience away
    assert not got.is_set()
    wait_until(lambda: len(looks.timeouts) == 8, what="the waiter's next wait")
    waits = [w / 0.5 for w in looks.timeouts if w is not None]
    assert waits == [1, 2, 4, 8, 16, 16, 16, 1]
    assert LONGEST_LOOK == 16
    looks.look()  # the same call still running: taken over
    assert got.wait(DEADLINE)
    looks.free_run()
    t.join(DEADLINE)


def test_habits_learn_which_controllers_block_and_ignore_one_odd_call() -> None:
    habits = Habits()
    assert habits.blocks("new")  # not seen yet: its calls hand their lanes over
    for _ in range(6):
        habits.record("fast", 0.0)
    assert not habits.blocks("fast")  # a handful of instant calls are enough
    for _ in range(14):
        habits.record("fast", 0.0)
    habits.record("fast", 1.0)  # one call descheduled (or one slow call) ...
    assert not habits.blocks("fast")  # ... does not change its habit
    slow_calls = 0
    while not habits.blocks("fast"):  # calls that keep blocking do, within a few
        habits.record("fast", SLOW_CALL * 10)
        slow_calls += 1
    assert slow_calls <= 5
    habits.record("fast", SLOW_CALL / 2)  # "slow" means longer than SLOW_CALL
    habits.record("other", 0.0)  # controllers are told apart
    assert habits.blocks("new")


def test_lanes_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Lanes(0)
