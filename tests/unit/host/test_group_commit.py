"""Group commit (runner/host/runtime/_groupcommit.py): callers that arrive while a
round commits are committed together in the next round, each gets its own result,
and an error of a round reaches every caller of that round and no other."""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence

import pytest
from waiting import wait_until

from runner.host.runtime._groupcommit import GroupCommit


class Rounds:
    """A batch function whose first round waits until the test lets it go."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.entered = threading.Event()
        self.go = threading.Event()

    def __call__(self, jobs: Sequence[int]) -> list[int]:
        self.batches.append(list(jobs))
        if len(self.batches) == 1:
            self.entered.set()
            assert self.go.wait(30)
        if -1 in jobs:
            raise RuntimeError("the store refused the round")
        return [job * 10 for job in jobs]


def _submit_all(commits: GroupCommit[int, int], jobs: list[int]
                ) -> tuple[list[threading.Thread], dict[int, int | BaseException]]:
    got: dict[int, int | BaseException] = {}

    def one(job: int) -> None:
        try:
            got[job] = commits.submit(job)
        except RuntimeError as exc:
            got[job] = exc
    threads = [threading.Thread(target=one, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    return threads, got


def test_callers_that_arrive_during_a_commit_share_the_next_one() -> None:
    rounds = Rounds()
    commits = GroupCommit(rounds)
    first, got_first = _submit_all(commits, [1])
    assert rounds.entered.wait(30)
    threads, got = _submit_all(commits, [2, 3, 4, 5])
    wait_until(lambda: len(commits._pending) == 4, what="four callers waiting")
    rounds.go.set()
    for t in first + threads:
        t.join(30)
    assert rounds.batches == [[1], [2, 3, 4, 5]]  # one commit for the four
    assert commits.rounds == 2
    assert got_first == {1: 10}
    assert got == {2: 20, 3: 30, 4: 40, 5: 50}
    assert commits.submit(6) == 60  # a lone caller commits at once, alone


def test_a_failed_round_fails_its_callers_only() -> None:
    rounds = Rounds()
    commits = GroupCommit(rounds)
    first, got_first = _submit_all(commits, [1])
    assert rounds.entered.wait(30)
    threads, got = _submit_all(commits, [-1, 2])
    wait_until(lambda: len(commits._pending) == 2, what="two callers waiting")
    rounds.go.set()
    for t in first + threads:
        t.join(30)
    assert got_first == {1: 10}
    assert {job: str(v) for job, v in got.items()} == {
        -1: "the store refused the round", 2: "the store refused the round"}
    assert commits.submit(3) == 30  # the next round is not hurt


def test_a_round_takes_at_most_max_batch_callers() -> None:
    rounds = Rounds()
    commits = GroupCommit(rounds, max_batch=2)
    first, _ = _submit_all(commits, [1])
    assert rounds.entered.wait(30)
    threads, got = _submit_all(commits, [2, 3, 4])
    wait_until(lambda: len(commits._pending) == 3, what="three callers waiting")
    rounds.go.set()
    for t in first + threads:
        t.join(30)
    assert [len(b) for b in rounds.batches] == [1, 2, 1]
    assert got == {2: 20, 3: 30, 4: 40}


def test_a_result_count_that_does_not_match_is_an_error() -> None:
    commits: GroupCommit[int, int] = GroupCommit(lambda jobs: [])
    with pytest.raises(RuntimeError, match="a group commit of 1 gave 0 results"):
        commits.submit(1)


def test_with_two_rounds_a_second_caller_commits_at_once_and_a_third_waits() -> None:
    """`rounds=2` (a store whose writers work side by side): the second caller does
    not wait for the first round; the third and fourth, arriving while two rounds
    run, share the next."""
    entered = threading.Semaphore(0)
    go = threading.Event()
    batches: list[list[int]] = []

    def run(jobs: Sequence[int]) -> list[int]:
        batches.append(list(jobs))
        if len(batches) <= 2:
            entered.release()
            assert go.wait(30)
        return [job * 10 for job in jobs]

    commits = GroupCommit(run, rounds=2)
    first, _ = _submit_all(commits, [1])
    assert entered.acquire(timeout=30)
    second, _ = _submit_all(commits, [2])
    assert entered.acquire(timeout=30)  # a round of its own while the first runs
    assert commits.running == 2
    rest, got = _submit_all(commits, [3, 4])
    wait_until(lambda: len(commits._pending) == 2, what="two callers waiting")
    go.set()
    for t in first + second + rest:
        t.join(30)
    assert batches == [[1], [2], [3, 4]]
    assert got == {3: 30, 4: 40}


def test_a_caller_whose_job_another_round_took_waits_for_it_without_committing() -> None:
    """With a round to spare, a caller whose job is being committed by another
    caller's round waits for that round: it commits no (empty) round meanwhile."""
    gates = [threading.Event() for _ in range(4)]
    entered = threading.Semaphore(0)
    batches: list[list[int]] = []

    def run(jobs: Sequence[int]) -> list[int]:
        batches.append(list(jobs))
        n = len(batches) - 1
        entered.release()
        if n < len(gates):
            assert gates[n].wait(30)
        return [job * 10 for job in jobs]

    commits = GroupCommit(run, rounds=3)
    started = []
    for job in (1, 2, 3):  # three rounds under way: every round taken
        threads, _ = _submit_all(commits, [job])
        started += threads
        assert entered.acquire(timeout=30)
    rest, got = _submit_all(commits, [4, 5])
    wait_until(lambda: len(commits._pending) == 2, what="two callers waiting")
    gates[0].set()  # a round frees: one of 4 and 5 commits both, and holds there
    assert entered.acquire(timeout=30)
    assert batches[3] == [4, 5]
    gates[1].set()  # a round is free, but 4 and 5 are being committed already
    wait_until(lambda: commits.rounds == 2, what="the second round's end")
    assert len(batches) == 4  # no empty round
    gates[3].set()
    gates[2].set()
    for t in started + rest:
        t.join(30)
    assert batches == [[1], [2], [3], [4, 5]]
    assert got == {4: 40, 5: 50}


class Interrupted(Exception):
    """What the test's signal handler raises in the main thread (as SIGINT would)."""


def _interrupt_main_while_waiting(commits: GroupCommit[int, int], rounds: Rounds, *,
                                  handed_first: bool) -> dict[int, int | BaseException]:
    """The main thread submits 2 behind round [1] and a thread submits 3 after it;
    then a signal interrupts the main thread's wait, before the round ends or (with
    `handed_first`) once the round has ended and handed the next one to it. What the
    other caller got."""
    main = threading.get_ident()
    in_handler = threading.Event()
    got: dict[int, int | BaseException] = {}

    def handler(signum: int, frame: object) -> None:
        in_handler.set()
        if handed_first:  # the round ends and hands the main thread the next one
            wait_until(lambda: commits.rounds == 1, what="the first round's end")
        raise Interrupted

    def drive() -> None:
        wait_until(lambda: len(commits._pending) == 1, what="the main thread waiting")
        threads, got_other = _submit_all(commits, [3])
        wait_until(lambda: len(commits._pending) == 2, what="the second caller waiting")
        signal.pthread_kill(main, signal.SIGUSR1)
        assert in_handler.wait(30)
        rounds.go.set()
        for t in threads:
            t.join(30)
        got.update(got_other)

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        first, _ = _submit_all(commits, [1])
        assert rounds.entered.wait(30)
        driver = threading.Thread(target=drive)
        driver.start()
        with pytest.raises(Interrupted):
            commits.submit(2)
        driver.join(40)
        for t in first:
            t.join(30)
    finally:
        signal.signal(signal.SIGUSR1, old)
    return got


@pytest.mark.parametrize("handed_first", [False, True], ids=["waiting", "handed"])
def test_an_interrupted_caller_neither_stalls_the_others_nor_commits(
        handed_first: bool) -> None:
    """A caller whose wait a signal interrupts leaves: its job, which no round took,
    is not committed (nobody would hear of it), and a round it was handed goes on to
    the next caller. Kept, the round stalled every later caller for good."""
    rounds = Rounds()
    commits = GroupCommit(rounds)
    got = _interrupt_main_while_waiting(commits, rounds, handed_first=handed_first)
    assert got == {3: 30}
    assert rounds.batches == [[1], [3]]
    assert commits.running == 0
    assert commits._pending == []
    assert commits.submit(4) == 40  # and later callers commit at once
