"""runner._leases.Renewer: one thread keeps every held claim alive, due on the Clock.

The renewer runs on a FakeClock here: renewals come due only when the test moves
the clock, and the renewer itself never moves it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from waiting import wait_until

from runner._leases import Renewer
from runner.clock import FakeClock

TICK = 0.005


class Item:
    def __init__(self, name: str) -> None:
        self.name = name


class Book:
    """The renew/lost/poll callbacks, recording what the renewer did."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.renewed: list[str] = []
        self.lost: list[str] = []
        self.polled: list[str] = []
        self.answer: dict[str, bool | None] = {}  # default True
        self.raise_for: set[str] = set()

    def renew(self, item: Item) -> bool | None:
        if item.name in self.raise_for:
            raise RuntimeError("store exploded")
        with self.lock:
            self.renewed.append(item.name)
        return self.answer.get(item.name, True)

    def on_lost(self, item: Item) -> None:
        with self.lock:
            self.lost.append(item.name)

    def poll(self, item: Item) -> None:
        with self.lock:
            self.polled.append(item.name)

    def count(self, name: str) -> int:
        with self.lock:
            return self.renewed.count(name)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def book() -> Book:
    return Book()


@pytest.fixture
def renewer(clock: FakeClock, book: Book) -> Iterator[Renewer[Item]]:
    r: Renewer[Item] = Renewer(clock, book.renew, book.on_lost, renew_every=10.0, tick=TICK,
                               poll=book.poll, name="test-renewer")
    yield r
    r.close(timeout=5)


def _ticks(book: Book, name: str, n: int) -> None:
    """Wait until the renewer has visited `name` `n` more times (polls are per tick)."""
    with book.lock:
        target = book.polled.count(name) + n
    wait_until(lambda: book.polled.count(name) >= target, what=f"{n} ticks of {name}")


def test_an_item_is_renewed_once_renew_every_has_passed_on_the_clock(
        clock: FakeClock, book: Book, renewer: Renewer[Item]) -> None:
    a = Item("a")
    renewer.add(a)
    _ticks(book, "a", 5)
    assert book.count("a") == 0  # no virtual time has passed: nothing is due
    clock.advance(9.9)
    _ticks(book, "a", 3)
    assert book.count("a") == 0
    clock.advance(0.1)
    wait_until(lambda: book.count("a") == 1, what="the first renewal")
    _ticks(book, "a", 3)
    assert book.count("a") == 1  # the next one is due 10 s after this one
    clock.advance(10)
    wait_until(lambda: book.count("a") == 2, what="the second renewal")


def test_the_renewer_never_moves_the_clock(clock: FakeClock, book: Book,
                                            renewer: Renewer[Item]) -> None:
    before = clock.monotonic()
    renewer.add(Item("a"))
    _ticks(book, "a", 10)
    assert clock.monotonic() == before


def test_a_lost_renewal_is_reported_once_and_the_item_dropped(
        clock: FakeClock, book: Book, renewer: Renewer[Item]) -> None:
    a, b = Item("a"), Item("b")
    book.answer["a"] = False
    renewer.add(a)
    renewer.add(b)
    clock.advance(10)
    wait_until(lambda: book.lost == ["a"], what="a reported lost")
    assert len(renewer) == 1
    clock.advance(10)
    wait_until(lambda: book.count("b") == 2, what="b renewed again")
    assert book.count("a") == 1
    assert book.lost == ["a"]


def test_an_unknown_outcome_is_retried_on_the_next_tick_not_a_period_later(
        clock: FakeClock, book: Book, renewer: Renewer[Item]) -> None:
    a = Item("a")
    book.answer["a"] = None  # a busy store
    renewer.add(a)
    clock.advance(10)
    wait_until(lambda: book.count("a") >= 3, what="retries without the clock moving")
    assert book.lost == []


def test_a_renew_that_raises_does_not_stop_the_renewer(
        clock: FakeClock, book: Book, renewer: Renewer[Item]) -> None:
    a, b = Item("a"), Item("b")
    book.raise_for.add("a")
    renewer.add(a)
    renewer.add(b)
    clock.advance(10)
    wait_until(lambda: book.count("b") == 1, what="b renewed despite a")
    book.raise_for.clear()
    wait_until(lambda: book.count("a") == 1, what="a renewed on a later tick")
    assert renewer.running


def test_a_removed_item_is_no_longer_renewed_and_the_thread_exits(
        clock: FakeClock, book: Book, renewer: Renewer[Item]) -> None:
    a = Item("a")
    renewer.add(a)
    _ticks(book, "a", 1)
    renewer.remove(a)
    wait_until(lambda: not renewer.running, what="the thread to exit (no linger)")
    clock.advance(100)
    renewer.add(Item("b"))  # a new item starts it again
    wait_until(lambda: renewer.running and book.polled.count("b") > 0, what="a new thread")
    assert book.count("a") == 0


def test_one_thread_serves_every_item_and_lingers_for_the_next(
        clock: FakeClock, book: Book) -> None:
    name = "test-renewer-linger"
    r: Renewer[Item] = Renewer(clock, book.renew, book.on_lost, renew_every=1.0, tick=TICK,
                               poll=book.poll, linger=30.0, name=name)
    try:
        items = [Item(f"i{n}") for n in range(20)]
        for item in items:
            r.add(item)
        clock.advance(1)
        wait_until(lambda: all(book.count(i.name) == 1 for i in items), what="all renewed")
        assert [t.name for t in threading.enumerate()].count(name) == 1
        for item in items:
            r.remove(item)
        assert len(r) == 0
        assert r.running  # lingering for the next item instead of exiting
        r.add(Item("late"))
        wait_until(lambda: book.polled.count("late") > 0, what="the lingering thread serving")
        assert [t.name for t in threading.enumerate()].count(name) == 1
    finally:
        r.close(timeout=5)
    assert not r.running


def test_renew_every_must_be_positive(clock: FakeClock, book: Book) -> None:
    with pytest.raises(ValueError, match="renew_every"):
        Renewer(clock, book.renew, book.on_lost, renew_every=0)
