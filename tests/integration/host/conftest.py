"""Fixtures for the session-host tests: a `session(...)` factory that cleans up."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import AGENT_WF, Session, make_session


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Callable[..., Session]]:
    made: list[Session] = []

    def make(model: Any, workflows: dict[str, str] | None = None, **kw: Any) -> Session:
        s = make_session(tmp_path, model, workflows if workflows is not None
                         else {"hello": AGENT_WF}, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
