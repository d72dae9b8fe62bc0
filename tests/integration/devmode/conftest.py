"""The `make_dev` fixture for the dev mode tests (helpers live in devkit.py)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from devkit import Dev


@pytest.fixture
def make_dev(tmp_path: Path) -> Iterator[Callable[..., Dev]]:
    devs: list[Dev] = []
    root = tmp_path / "proj"
    (root / ".wfrun").mkdir(parents=True)

    def make(workflows: dict[str, str] | None = None, **options: Any) -> Dev:
        if workflows is not None:
            (root / ".wfrun" / "workflows").mkdir(exist_ok=True)
            for name, text in workflows.items():
                (root / ".wfrun" / "workflows" / name).write_text(textwrap.dedent(text))
        dev = Dev(root, **options)
        dev.dev.start()
        devs.append(dev)
        return dev

    yield make
    for dev in devs:
        dev.dev.stop()
