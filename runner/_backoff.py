"""One backoff policy: exponential, capped, with jitter (issue 9).

    delay = min(cap, base x 2^(attempt-1)) x (low + width x r),   r in [0, 1)

then capped again. `r` comes from, in this order of preference: `seed` (a string;
the same seed always gives the same delay, so a resumed run waits what the first
run recorded), `rng` (a `random.Random` the caller owns, seedable in tests), or the
module's shared generator. Two users, two jitter bands:

    engine node retries      jitter (0.8, 0.4): 80-120 % of the step, seeded per
                             (run, node, attempt)
    controller reconciles    jitter (0.5, 0.5): 50-100 %, so retries spread out

This module imports only the standard library so every layer may use it.
"""

from __future__ import annotations

import hashlib
import random

__all__ = ["CONTROLLER_JITTER", "ENGINE_JITTER", "backoff_delay", "seeded_random"]

#: (low, width): the delay is `low + width * r` of the capped exponential step.
ENGINE_JITTER = (0.8, 0.4)
CONTROLLER_JITTER = (0.5, 0.5)


def seeded_random(seed: str) -> float:
    """A number in [0, 1) that depends only on `seed` (SHA-256 seeds the generator)."""
    return random.Random(hashlib.sha256(seed.encode()).digest()).random()


def backoff_delay(attempt: int, base: float, cap: float | None = None,
                  rng: random.Random | None = None, *,
                  jitter: tuple[float, float] = CONTROLLER_JITTER,
                  seed: str | None = None) -> float:
    """Seconds to wait before try number `attempt + 1` (attempt 1 is the first failure).

    The step doubles per attempt from `base`, is capped at `cap` (None: no cap), and
    is jittered by `jitter`; the result never exceeds `cap`. Attempts below 1 count as
    1. Exactly one random number is drawn from `rng` when it is used.
    """
    step = base * (2 ** max(attempt - 1, 0))
    if cap is not None:
        step = min(step, cap)
    r = seeded_random(seed) if seed is not None else (rng or _SHARED).random()
    low, width = jitter
    delay = step * (low + width * r)
    return float(min(delay, cap) if cap is not None else delay)


_SHARED = random.Random()
