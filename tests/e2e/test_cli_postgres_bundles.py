"""Run bundles in the database, end to end: two `wfrun host` processes in separate
folders (no shared files) on one throwaway Postgres. Host A runs a launch until its
second node blocks, is SIGKILLed, and host B takes the run over after A's lease and
finishes it from the bundle in the database: node one's side effect is not repeated,
the launch ends once, and `wfrun show` / `wfrun logs` from a third folder print it.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pgcluster import PgCluster
from waiting import wait_until

from runner.clock import FileClock

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).parent
WORKFLOW = """
    start: one
    nodes:
      one: {action: {shell: [sh, -c, 'echo "{{ run.id }}" >> "$1"; echo one-ran', sh, EFFECTS]}}
      two:
        action:
          shell: [sh, -c, 'echo x >> "$1"; while [ ! -e "$2" ]; do sleep 0.1; done; echo two-ran',
                  sh, STARTED, GO]
      three: {compute: "{{ 'L' * 5000 }}"}
    edges:
      - {from: one, to: two}
      - {from: two, to: three}
"""


def wfrun(folder: Path, url: str, *args: str,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if k != "WFRUN_STORE"}, **(env or {})}
    return subprocess.run([sys.executable, "-m", "runner", "--project", str(folder),
                           "--store", url, *args], capture_output=True, text=True,
                          timeout=120, cwd=folder, env=env, check=False)


class Hosts:
    def __init__(self, root: Path, url: str, workflow: str = WORKFLOW,
                 name: str = "blocky") -> None:
        self.root, self.url, self.name = root, url, name
        self.effects, self.started, self.go = (root / "effects", root / "started",
                                               root / "go")
        text = textwrap.dedent(workflow).replace("EFFECTS", str(self.effects)).replace(
            "STARTED", str(self.started)).replace("GO", str(self.go))
        for host in ("enqueuer", "a", "b", "viewer"):
            folder = root / host / ".wfrun" / "workflows"
            folder.mkdir(parents=True)
            (folder / f"{name}.yaml").write_text(text)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def folder(self, name: str) -> Path:
        return self.root / name

    def enqueue(self) -> str:
        done = subprocess.run(
            [sys.executable, str(HERE / "pg_enqueue.py"), str(self.folder("enqueuer")),
             self.url, self.name, "1"], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def start(self, name: str) -> None:
        log = (self.root / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "runner", "--project", str(self.folder(name)), "--store",
             self.url, "host", "--lease", "2", "--max-runs", "1", "--no-controllers"],
            stdout=subprocess.DEVNULL, stderr=log, cwd=self.folder(name),
            start_new_session=True)
        log.close()

    def kill(self, name: str) -> None:
        process = self.procs[name]
        os.killpg(process.pid, signal.SIGKILL)  # the host and its shell step
        process.wait()

    def stop_all(self) -> None:
        for process in self.procs.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.procs.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def launch(self, run_id: str) -> tuple[str, str | None]:
        with psycopg.connect(self.url) as conn:
            row = conn.execute("SELECT status, error_message FROM workflow_run_queue"
                               " WHERE run_id = %s", (run_id,)).fetchone()
        assert row is not None
        return str(row[0]), row[1]

    def events(self, run_id: str) -> list[str]:
        with psycopg.connect(self.url) as conn:
            rows = conn.execute("SELECT type FROM run_events WHERE run_id = %s ORDER BY seq",
                                (run_id,)).fetchall()
        return [str(r[0]) for r in rows]


@pytest.fixture
def hosts(pg_cluster: PgCluster, tmp_path: Path) -> Iterator[Hosts]:
    made = Hosts(tmp_path, pg_cluster.create_schema(f"bundles_{secrets.token_hex(4)}"))
    try:
        yield made
    finally:
        made.stop_all()


def test_a_run_taken_over_by_another_host_finishes_from_the_database(hosts: Hosts) -> None:
    run_id = hosts.enqueue()
    hosts.start("a")
    wait_until(hosts.started.exists, timeout=120, what="node two running on host A")
    hosts.kill("a")
    assert hosts.launch(run_id)[0] == "running"
    hosts.go.write_text("")  # node two may finish now, wherever it runs again
    hosts.start("b")
    wait_until(lambda: hosts.launch(run_id)[0] in ("done", "failed", "cancelled"),
               timeout=120, what=lambda: f"the launch ended: {hosts.launch(run_id)}")
    status, message = hosts.launch(run_id)
    assert status == "done", message
    assert hosts.effects.read_text().split() == [run_id]  # node one ran once, on A
    assert hosts.started.read_text() == "x\nx\n"  # node two: interrupted on A, re-run on B
    events = hosts.events(run_id)
    assert events.count("launch.reclaimed") == 1
    assert events.count("launch.running") == 1
    assert sum(events.count(f"launch.{s}") for s in ("done", "failed", "cancelled")) == 1
    for name in ("a", "b", "enqueuer"):  # no host holds a bundle file
        assert not (hosts.folder(name) / ".wfrun" / "runs" / run_id / "trace.jsonl").exists()

    viewer = hosts.folder("viewer")
    shown = wfrun(viewer, hosts.url, "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["status"] == "completed"
    assert json.dumps(view).count("L" * 5000) >= 1  # the >4 KiB output, read back
    text = wfrun(viewer, hosts.url, "show", run_id)
    assert text.returncode == 0, text.stderr
    assert run_id in text.stdout
    logs = wfrun(viewer, hosts.url, "logs", run_id)
    assert logs.returncode == 0, logs.stderr
    assert "one-ran" in logs.stdout
    assert "two-ran" in logs.stdout
    runs = wfrun(viewer, hosts.url, "runs")
    assert runs.returncode == 0, runs.stderr
    assert run_id in runs.stdout
    assert not (viewer / ".wfrun" / "runs" / run_id).exists()


ASK = """
    start: one
    nodes:
      one: {compute: "{{ 'first' }}"}
      ask: {checkpoint: "go on?"}
      done: {compute: "{{ {'one': outputs.one, 'answer': outputs.ask.answer} }}"}
    edges:
      - {from: one, to: ask}
      - {from: ask, to: done}
"""


def test_a_waiting_run_is_answered_and_pruned_from_another_folder(
    pg_cluster: PgCluster, tmp_path: Path
) -> None:
    url = pg_cluster.create_schema(f"answer_{secrets.token_hex(4)}")
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        (folder / ".wfrun" / "workflows").mkdir(parents=True)
        (folder / ".wfrun" / "workflows" / "ask.yaml").write_text(textwrap.dedent(ASK))
    # The runs start "two days ago" on a shared clock file, so prune sees them as old.
    clock = FileClock.create(tmp_path / "clock", time.time() - 2 * 86400)
    at = {"WFRUN_CLOCK_FILE": str(clock.path)}
    started = wfrun(first, url, "run", "ask", "--json", env=at)
    assert started.returncode == 4, started.stderr  # 4: waiting at a checkpoint
    parent = json.loads(started.stdout)["run_id"]
    assert json.loads(started.stdout)["status"] == "waiting"
    answered = wfrun(second, url, "answer", parent, "yes", "--json", env=at)
    assert answered.returncode == 0, answered.stderr
    child = json.loads(answered.stdout)
    assert child["status"] == "completed", child
    assert child["final_output"] == {"one": "first", "answer": "yes"}
    again = wfrun(first, url, "answer", parent, "no")
    assert again.returncode != 0
    assert "already answered" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1  # one line, no traceback
    for folder in (first, second):
        assert not (folder / ".wfrun" / "runs" / parent).exists()
    pruned = wfrun(second, url, "prune", "--older-than", "1d", "--yes", "--json")
    assert pruned.returncode == 0, pruned.stderr
    gone = wfrun(first, url, "show", parent)
    assert gone.returncode != 0
    assert "no run" in gone.stderr
    with psycopg.connect(url) as conn:
        left = conn.execute("SELECT count(*) FROM run_bundles").fetchone()
    assert left == (0,)


CRASHY = """
    start: one
    nodes:
      one: {action: {shell: [sh, -c, 'echo "{{ run.id }}" >> "$1"; echo one-ran', sh, EFFECTS]}}
      two: {compute: "{{ outputs.one ~ '!' }}"}
    edges:
      - {from: one, to: two}
"""


#: Just before the seal the writer holds the run's ending (event, state, manifest)
#: for the seal's transaction, so a kill there leaves the ending unwritten.
ENDING = "before_seal"


@pytest.mark.parametrize("point", ["after_bundle_created", "after_manifest_written",
                                   "after_trace_append", ENDING])
def test_a_host_killed_at_an_engine_crash_point_is_finished_by_another(
    pg_cluster: PgCluster, tmp_path: Path, point: str
) -> None:
    """WFRUN_CRASH_AT SIGKILLs host A at the point (the bundle is in the database by
    then, whole or half-made); host B, in another folder, takes the launch over after
    A's lease and finishes it: one terminal state, node one's side effect once (A
    dies before it starts, or after its `node_finished` is in the database)."""
    b = Hosts(tmp_path, pg_cluster.create_schema(f"crash_{secrets.token_hex(4)}"), CRASHY,
              "crashy")
    run_id = b.enqueue()
    env = {k: v for k, v in os.environ.items() if k != "WFRUN_STORE"}
    killed = subprocess.run(
        [sys.executable, "-m", "runner", "--project", str(b.folder("a")), "--store", b.url,
         "host", "--lease", "3", "--no-controllers", "--once"],
        capture_output=True, text=True, timeout=120, cwd=b.folder("a"),
        env={**env, "WFRUN_CRASH_AT": point}, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    if point == ENDING:
        # Killed with the ending held (node two's end, the run's event, state, manifest
        # and seal are one transaction that never began): the database has node two's
        # start, neither its end nor the run's.
        with psycopg.connect(b.url) as conn:
            kinds = [json.loads(r[0])["type"] for r in conn.execute(
                "SELECT event FROM run_trace WHERE run_id = %s ORDER BY seq", (run_id,))]
        assert kinds[-2:] == ["node_finished", "node_started"], kinds
        assert "run_completed" not in kinds, kinds
    # B keeps polling until A's lease has expired and it can take the launch over. A's
    # lease is 3 s, not 1: with both cores kept busy, A's 1 s lease once lapsed while its
    # node one ran (a busy CI run: the effect twice; most likely as a lease that lapses
    # under a live holder lets any host, A's own among them, take the launch again).
    try:
        b.start("b")
        wait_until(lambda: b.launch(run_id)[0] in ("done", "failed", "cancelled"),
                   timeout=120, what=lambda: f"the launch ended: {b.launch(run_id)}")
    finally:
        b.stop_all()
    assert b.launch(run_id)[0] == "done", b.launch(run_id)
    events = b.events(run_id)
    assert sum(events.count(f"launch.{s}") for s in ("done", "failed", "cancelled")) == 1
    # A died before node one started, or after its ending was durable: it ran once.
    assert b.effects.read_text().split() == [run_id], events
    shown = wfrun(b.folder("viewer"), b.url, "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "completed"


CONTROLLERS = Path(__file__).resolve().parents[2] / "fixtures" / "controllers" / "project"


def test_a_controllers_child_workflow_runs_into_the_database(
    pg_cluster: PgCluster, tmp_path: Path
) -> None:
    """A controller's child run is a launch row like any other: on Postgres its bundle
    is rows, so another folder shows it and the parent's pass sees it succeed."""
    import shutil

    url = pg_cluster.create_schema(f"children_{secrets.token_hex(4)}")
    project, viewer = tmp_path / "project", tmp_path / "viewer"
    shutil.copytree(CONTROLLERS / "workflows", project / ".wfrun" / "workflows")
    shutil.copytree(CONTROLLERS / "controllers", project / ".wfrun" / "controllers")
    (viewer / ".wfrun").mkdir(parents=True)
    spec = tmp_path / "probe.json"
    spec.write_text(json.dumps({"child": "slow-child"}))
    applied = wfrun(project, url, "controller", "apply", "probe", "p1", str(spec))
    assert applied.returncode == 0, applied.stderr
    done = wfrun(project, url, "controller", "run", "--once")
    assert done.returncode == 0, done.stderr
    got = wfrun(project, url, "controller", "get", "probe", "p1", "--json")
    assert got.returncode == 0, got.stderr
    view = json.loads(got.stdout)
    ready = next(c for c in view["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Done")
    (child,) = view["workflows"]
    assert (child["workflow"], child["state"]) == ("slow-child", "succeeded")
    shown = wfrun(viewer, url, "show", child["run_id"], "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "completed"
    assert not (project / ".wfrun" / "runs" / child["run_id"] / "trace.jsonl").exists()
