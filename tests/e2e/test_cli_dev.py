"""`wfrun dev` end to end: a real subprocess watching a real project while files are saved."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import IO

import pytest
from waiting import DEADLINE

FLOW = """\
    start: one
    nodes:
      one: {compute: "{{ 20 + 22 }}"}
"""
BROKEN = """\
    start: one
    nodes:
      one: {compute: "{{ 20 + 22 }}"}
    edges:
      - {from: one, to: nowhere}
"""


class DevProcess:
    def __init__(self, root: Path, *args: str) -> None:
        self.root = root
        self.lines = {"out": queue.Queue[str](), "err": queue.Queue[str]()}
        self.seen: list[tuple[str, str]] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "--project", str(root), "dev", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root,
            env={**os.environ, "COLUMNS": "200"})
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        self.readers = [threading.Thread(target=self._read, args=(name, pipe), daemon=True)
                        for name, pipe in (("out", self.proc.stdout),
                                           ("err", self.proc.stderr))]
        for reader in self.readers:
            reader.start()

    def _read(self, name: str, pipe: IO[str]) -> None:
        for line in pipe:
            self.lines[name].put(line.rstrip("\n"))

    def expect(self, stream: str, pattern: str, timeout: float = DEADLINE) -> str:
        """The next line on `stream` matching `pattern` (skipped lines are kept in `seen`)."""
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.lines[stream].get(timeout=max(end - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no {stream} line matching {pattern!r} within "
                                     f"{timeout} s; saw {self.seen}") from None
            self.seen.append((stream, line))
            if re.search(pattern, line):
                return line

    def stop(self) -> tuple[int, list[tuple[str, str]]]:
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=10)
        for reader in self.readers:
            reader.join(timeout=5)
        rest = []
        for name, lines in self.lines.items():
            while not lines.empty():
                rest.append((name, lines.get()))
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        return code, rest


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "flow.yaml").write_text(textwrap.dedent(FLOW))
    return root


def save(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(textwrap.dedent(text))
    os.replace(tmp, path)


def _wfrun(project: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "runner", "--project", str(project), *args],
                          capture_output=True, text=True, timeout=DEADLINE, cwd=project)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_dev_reports_saves_and_reruns_the_workflow(project: Path) -> None:
    path = project / ".wfrun" / "workflows" / "flow.yaml"
    dev = DevProcess(project, "flow", "--run", "flow")
    try:
        first = dev.expect("out", r"^ok flow sha256:[0-9a-f]{64}$")
        dev.expect("err", r"^watching 1 workflow\(s\)")

        save(path, BROKEN)
        error = dev.expect("err", r"error\[")
        assert error.startswith(f"{path.as_posix()}:5:")
        assert "nowhere" in error

        save(path, FLOW.replace("20 + 22", "40 + 2"))
        fixed = dev.expect("out", r"^ok flow sha256:")
        assert fixed != first  # a new digest for the new content
        ran = dev.expect("out", r"^run flow ")
        match = re.fullmatch(r"run flow completed \((flow-\d{8}T\d{6}Z-[0-9a-f]{8})\)", ran)
        assert match is not None, ran
        run_id = match.group(1)
        assert (project / ".wfrun" / "runs" / run_id / "manifest.json").is_file()
        # A launch row like every other run: `runs` lists it and `status` knows it.
        listed = _wfrun(project, "runs", "--json")
        assert [(r["run_id"], r["status"]) for r in json.loads(listed)["runs"]] == [
            (run_id, "completed")]
        status = json.loads(_wfrun(project, "status", "--json", run_id))
        assert (status["status"], status["launch"]["status"]) == ("completed", "done")

        (project / ".wfrun" / "workflows" / "extra.yaml").write_text(textwrap.dedent(FLOW))
        time.sleep(0.3)  # a workflow that was not named is watched but not reported
        path.unlink()
        dev.expect("out", r"^flow removed from the catalog$")
    finally:
        code, rest = dev.stop()
    assert code == 0
    assert all("extra" not in line for _, line in dev.seen + rest)
    assert any(re.match(r"\d+ change batch\(es\); median event->output \d+ ms", line)
               for stream, line in rest if stream == "err"), rest
