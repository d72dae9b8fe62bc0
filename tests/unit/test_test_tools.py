"""The suite's own tools: `wait_until`'s back-off (tests/waiting.py) and the CPU report
(tests/cpuprofile.py), which find and keep down what the suite costs (issue 34 item 11)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import cpuprofile
import pytest
import waiting


class FakeTime:
    """A clock that moves only when slept on or when a check takes time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(round(seconds, 4))
        self.now += seconds


def test_wait_until_backs_off_to_its_cap_and_never_polls_faster_than_the_check_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTime()
    monkeypatch.setattr(waiting, "time", fake)
    calls = iter(range(1000))
    assert waiting.wait_until(lambda: next(calls) == 12) is True
    assert fake.pauses[0] == 0.01
    assert all(b >= a for a, b in zip(fake.pauses, fake.pauses[1:], strict=False))
    assert max(fake.pauses) == waiting.MAX_INTERVAL  # capped: a long wait still sees the event
    assert fake.pauses[-3:] == [waiting.MAX_INTERVAL] * 3

    # A check that takes 0.3 s is followed by a pause at least as long.
    fake.pauses.clear()
    costly = iter(range(1000))

    def slow_check() -> bool:
        fake.now += 0.3
        return next(costly) == 3

    assert waiting.wait_until(slow_check) is True
    assert fake.pauses == [0.3, 0.3, 0.3]


def test_wait_until_still_fails_naming_what_it_waited_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTime()
    monkeypatch.setattr(waiting, "time", fake)
    with pytest.raises(AssertionError, match="timed out after 2 s waiting for the gate"):
        waiting.wait_until(lambda: False, timeout=2, what="the gate")
    assert fake.now <= 2.2  # the last pause ends at the deadline, not a whole cap later


@pytest.mark.parametrize(("argv", "kind"), [
    ([sys.executable, "-m", "runner", "--project", "/p", "status", "--json"], "wfrun status"),
    (["/x/.venv/bin/wfrun", "--store", "postgresql://h/db", "host", "--once"], "wfrun host"),
    ([sys.executable, "-c", "while True: pass"], "python -c"),
    ([sys.executable, "/repo/bench/bench_ui.py", "--smoke"], "python bench_ui.py"),
    (["runuser", "-u", "postgres", "--", "/usr/lib/postgresql/15/bin/initdb", "-D", "d"],
     "initdb"),
    ("echo hi", "echo hi"),
    ([], "?"),
])
def test_spawns_are_named_by_kind(argv: Any, kind: str) -> None:
    assert cpuprofile._spawn_kind(argv) == kind


def test_the_report_ranks_tests_files_and_tiers_by_cpu(tmp_path: Path) -> None:
    rows = [
        {"test": "tests/e2e/test_a.py::test_one", "wall": 3.0, "self": 0.5, "children": 4.0,
         "postgres": 0.0, "spawns": {"wfrun run": 3}},
        {"test": "tests/e2e/test_a.py::test_two", "wall": 1.0, "self": 0.1, "children": 1.0,
         "postgres": 0.4, "spawns": {"wfrun run": 1, "sh": 2}},
        {"test": "tests/unit/test_b.py::test_three", "wall": 0.2, "self": 0.2,
         "children": 0.0, "postgres": 0.0, "spawns": {}},
    ]
    totals = [{"worker": "gw0", "self": 2.0, "children": 5.0}]
    text = cpuprofile.render(rows, totals)
    assert "tests: 3; CPU in tests: 6.2 s (worker 0.8, children 5.0, postgres 0.4)" in text
    assert "outside tests 1.2 s" in text
    tiers = text.split("## tiers")[1].split("##")[0].splitlines()
    assert tiers[2].split()[0] == "6.0"
    assert tiers[2].endswith("tests/e2e")
    assert tiers[3].endswith("tests/unit")
    assert "       4  wfrun run" in text
    assert "       2  sh" in text

    # The parts an interrupted run left are merged into the same report.
    folder = tmp_path / "cpu.txt.d"
    folder.mkdir()


    (folder / "gw0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    (folder / "gw1.jsonl").write_text(json.dumps(rows[2]) + "\n" + "{torn")
    cpuprofile.write_report(folder, tmp_path / "cpu.txt")
    assert "tests: 3;" in (tmp_path / "cpu.txt").read_text()


def test_the_profile_is_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cpuprofile.ENV, raising=False)
    registered: list[object] = []
    config = SimpleNamespace(pluginmanager=SimpleNamespace(
        register=lambda plugin, name: registered.append(plugin)))
    cpuprofile.configure(config)  # type: ignore[arg-type]
    assert registered == []
