"""Helpers for the crash tests: real `wfrun` processes killed at named points (DESIGN §4).

A project holds one four-node workflow. Nodes a, b and c are shell actions that
append their name to `counts` once their side effect is done, so the file says
how many times each really ran; d is a compute node whose output (the run's
final output) proves the outputs of a, b and c survived. Node b records its
process-group id in `b.pids`; its n-th attempt waits while the file `b.hold.<n>`
exists (so a test catches the run inside it for as long as it needs, however slow
the machine) and first removes `b.hold.<n-1>`, releasing the attempt before it: an
orphaned first attempt that were still alive would write its `b` beside the rerun.
Every node takes at least 0.15 s, longer than the engine's state.json throttle
(STATE_EVERY, 0.1 s), so each node_finished also replaces state.json and the
`after_state_replace:<n>` crash point names node n. Node c leaves a background
`sleep 30` behind (holding its output pipe), which the engine must clean up. Every
process the run starts carries `CRASHTAG=<tag>` in its environment, so leftovers
can be found in /proc.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from waiting import DEADLINE, wait_until

from runner.engine._bundlefmt import parse_trace
from runner.engine._processes import read_groups
from runner.engine._state import fold

WORKFLOW = """\
    name: crash
    start: a
    max_steps: 20
    nodes:
      a:
        action:
          use_shell: true
          shell: "sleep 0.15; echo a >> counts; echo A"
      b:
        action:
          use_shell: true
          shell: >-
            echo $$ >> b.pids; n=$(($(wc -l < b.pids))); rm -f b.hold.$((n - 1));
            sleep 0.15; while [ -e b.hold.$n ]; do sleep 0.1; done;
            echo b >> counts; echo B
      c:
        action:
          use_shell: true
          shell: "sleep 0.15; sleep 30 & echo c >> counts; echo C"
      d:
        compute: >-
          {{ {'a': outputs.a.stdout | trim, 'b': outputs.b.stdout | trim,
              'c': outputs.c.stdout | trim} }}
    edges:
      - {from: a, to: b}
      - {from: b, to: c}
      - {from: c, to: d}
"""
# Two short ones for the endings a crash can interrupt: a checkpoint (the run waits)
# and a failing node with no route (the run fails).
GATE = """\
    name: gate
    start: a
    nodes:
      a:
        action:
          use_shell: true
          shell: "echo a >> counts; echo A"
      ask:
        checkpoint: {summary: "Ship {{ outputs.a.stdout | trim }}?"}
    edges:
      - {from: a, to: ask}
"""
BROKEN = """\
    name: broken
    start: a
    nodes:
      a:
        action:
          use_shell: true
          shell: "echo a >> counts; exit 3"
      b:
        compute: "{{ 1 }}"
    edges:
      - {from: a, to: b}
"""
FINAL = {"a": "A", "b": "B", "c": "C"}
NODES = ("a", "b", "c", "d")
PROC_TIMEOUT = DEADLINE


@dataclass
class Project:
    root: Path
    tag: str

    @property
    def runs(self) -> Path:
        return self.root / ".wfrun" / "runs"

    def env(self, crash_at: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "WFRUN_CRASH_AT"}
        env["CRASHTAG"] = self.tag
        if crash_at:
            env["WFRUN_CRASH_AT"] = crash_at
        return env

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "runner", "--project", str(self.root), *args]

    def start(self, crash_at: str | None = None, workflow: str = "crash"
              ) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv("run", workflow, "--json", "-q"), cwd=self.root,
                                env=self.env(crash_at), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def run_killed_at(self, crash_at: str, workflow: str = "crash") -> str:
        """`wfrun run` that SIGKILLs itself at `crash_at`; returns the run id."""
        proc = self.start(crash_at, workflow)
        _out, err = proc.communicate(timeout=PROC_TIMEOUT)
        assert proc.returncode == -signal.SIGKILL, (proc.returncode, err)
        return self.only_run()

    def resume(self, run_id: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv("resume", run_id, "--json", "-q"), cwd=self.root,
                              env=self.env(crash_at), capture_output=True, text=True,
                              timeout=PROC_TIMEOUT, check=False)

    def kill_inside_b(self) -> tuple[str, int]:
        """Start a run, SIGKILL it while b's first attempt is held (once the runner has
        recorded b's process group for reaping); returns the run id and that group."""
        (self.root / "b.hold.1").touch()
        proc = self.start()
        pids = self.root / "b.pids"
        wait_for(lambda: pids.exists() and pids.read_text().strip() != "",
                 what="b to start")
        group = int(pids.read_text().split()[0])
        # The runner records a group right after spawning it; kill only once it has.
        wait_for(lambda: group in self.registered_groups(),
                 what=lambda: f"the runner to record b's group {group}")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=PROC_TIMEOUT)
        return self.only_run(), group

    def registered_groups(self) -> set[int]:
        """The process groups every runner of this project recorded for reaping."""
        groups: set[int] = set()
        for path in (self.root / ".wfrun" / "state" / "children").glob("*.json"):
            # Mid-replace or gone: nothing read, and the caller looks again.
            groups.update(int(e["pgid"]) for e in read_groups(path))
        return groups

    def only_run(self) -> str:
        names = [n for n in os.listdir(self.runs) if not n.startswith(".")]
        assert len(names) == 1, names
        return names[0]

    def counts(self) -> Counter[str]:
        path = self.root / "counts"
        return Counter(path.read_text().split()) if path.exists() else Counter()

    def trace_bytes(self, run_id: str) -> bytes:
        return (self.runs / run_id / "trace.jsonl").read_bytes()

    def events(self, run_id: str) -> list[dict[str, Any]]:
        parsed = parse_trace(self.trace_bytes(run_id))
        assert not parsed.torn
        return parsed.events

    def state_file(self, run_id: str) -> dict[str, Any]:
        value: dict[str, Any] = json.loads((self.runs / run_id / "state.json").read_text())
        return value

    def manifest(self, run_id: str) -> dict[str, Any]:
        value: dict[str, Any] = json.loads((self.runs / run_id / "manifest.json").read_text())
        return value

    def tagged(self) -> dict[int, int]:
        """Live (non-zombie) processes carrying this project's tag: pid -> process group."""
        found: dict[int, int] = {}
        needle = f"CRASHTAG={self.tag}".encode()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                environ = Path(f"/proc/{name}/environ").read_bytes()
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            if needle not in environ.split(b"\0"):
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                found[int(name)] = int(fields[2])
        return found


def wait_for(predicate: Any, timeout: float = DEADLINE, what: Any = None) -> None:
    wait_until(predicate, timeout=timeout, what=what or str(predicate))


def assert_recovered(project: Project, run_id: str, resumed: subprocess.CompletedProcess[str],
                     orphans: frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    """The invariants after a resume: completed, right outputs, a contiguous trace whose
    fold is exactly state.json, one node_finished per node, and no process of the run
    left alive except the given orphan groups of a killed process."""
    assert resumed.returncode == 0, resumed.stderr
    # SIGKILLed group members may take a moment to become zombies on a loaded machine.
    wait_for(lambda: set(project.tagged().values()) <= orphans,
             what=lambda: f"processes left behind: {project.tagged()}")
    outcome = json.loads(resumed.stdout)
    assert outcome["status"] == "completed"
    assert outcome["final_output"] == FINAL
    data = project.trace_bytes(run_id)
    assert data.endswith(b"\n")
    events = project.events(run_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    state = project.state_file(run_id)
    assert state["trace_seq"] == len(events)
    assert state == fold(run_id, events).to_json()
    assert state["status"] == "completed"
    assert state["final_output"] == FINAL
    assert project.manifest(run_id)["status"] == "completed"
    finished = Counter(e["node"] for e in events if e["type"] == "node_finished")
    assert finished == Counter(NODES)
    assert [e["type"] for e in events].count("run_completed") == 1
    return events
