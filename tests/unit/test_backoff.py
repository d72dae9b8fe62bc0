"""runner._backoff: the one exponential backoff (engine retries, controller reconciles)."""

from __future__ import annotations

import hashlib
import random

import pytest

from runner._backoff import CONTROLLER_JITTER, ENGINE_JITTER, backoff_delay, seeded_random
from runner.controllers import backoff_delay as controller_backoff
from runner.engine._runtypes import retry_delay


def _engine_before_issue_9(run_id: str, node: str, attempt: int, backoff: float,
                           max_delay: float | None) -> float:
    """The engine's own formula before it moved here: its values must not change
    (a resumed run waits what the first run recorded)."""
    base = backoff * (2 ** (attempt - 1))
    if max_delay is not None:
        base = min(base, max_delay)
    seed = hashlib.sha256(f"{run_id}|{node}|{attempt}".encode()).digest()
    delay = base * (0.8 + 0.4 * random.Random(seed).random())
    return float(min(delay, max_delay) if max_delay is not None else delay)


@pytest.mark.parametrize("max_delay", [None, 1.0, 5.0, 60.0])
@pytest.mark.parametrize("backoff", [0.1, 1.0, 2.0, 3.7])
def test_engine_retry_delays_are_exactly_what_they_were(backoff: float,
                                                         max_delay: float | None) -> None:
    for run in range(40):
        for attempt in range(1, 10):
            args = (f"run-{run}", "node", attempt, backoff, max_delay)
            assert retry_delay(*args) == _engine_before_issue_9(*args)


def test_a_seed_gives_the_same_delay_every_time_and_different_seeds_spread() -> None:
    a = backoff_delay(2, 1.0, None, jitter=ENGINE_JITTER, seed="run-1|n|2")
    assert a == backoff_delay(2, 1.0, None, jitter=ENGINE_JITTER, seed="run-1|n|2")
    spread = {backoff_delay(2, 1.0, None, jitter=ENGINE_JITTER, seed=f"run-{i}|n|2")
              for i in range(20)}
    assert len(spread) > 15
    assert all(1.6 <= d <= 2.4 for d in spread)  # 80-120 % of the 2 s step
    assert seeded_random("x") == seeded_random("x")


@pytest.mark.parametrize("jitter", [ENGINE_JITTER, CONTROLLER_JITTER])
def test_the_step_doubles_and_never_exceeds_the_cap(jitter: tuple[float, float]) -> None:
    rng = random.Random(1)
    low, width = jitter
    for attempt in range(1, 20):
        step = min(300.0, 1.0 * 2 ** (attempt - 1))
        for _ in range(10):
            d = backoff_delay(attempt, 1.0, 300.0, rng, jitter=jitter)
            assert step * low <= d <= min(step * (low + width), 300.0)


def test_attempts_below_one_count_as_the_first() -> None:
    assert backoff_delay(0, 4.0, None, jitter=(1.0, 0.0)) == 4.0
    assert backoff_delay(-3, 4.0, None, jitter=(1.0, 0.0)) == 4.0


def test_exactly_one_number_is_drawn_from_the_callers_generator() -> None:
    rng, twin = random.Random(42), random.Random(42)
    backoff_delay(3, 1.0, 300.0, rng)
    twin.random()
    assert rng.random() == twin.random()


def test_the_controller_backoff_is_this_one() -> None:
    assert controller_backoff is backoff_delay
