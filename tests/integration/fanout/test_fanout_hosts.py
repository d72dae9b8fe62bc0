"""ADR 0008 phase 2: a map's shell items spread over every host process, the parent
parked with the node open (no slot held) until the settle that ends its last item
re-queues it. SQLite: one host of two processes (`--processes 2`); Postgres: three
hosts, each in a folder of its own, sharing the database.

Each item logs `start N PID` and `end N PID` (PID: the runner process that ran it,
from the mark every command carries), appended whole to one file outside the project
folders, so the file says which process ran which item, how often, and how many at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fanoutkit import AT_ONCE, GATE, ITEMS
from pgcluster import PgCluster
from waiting import DEADLINE, wait_until

SPREAD = """\
    name: spread
    start: ls
    max_steps: 200
    nodes:
      ls: {{compute: "{{{{ range({items}) | list }}}}"}}
      files:
        map:
          over: "{{{{ outputs.ls }}}}"
          as: n
          max_concurrency: {at_once}
          do:
            action:
              use_shell: true
              shell: >-
                pid=$(echo $WFRUN_RUNNER_MARK | cut -d: -f2);
                echo "start {{{{ n }}}} $pid" >> {log};
                while [ $(grep -c start {log}) -lt {at_once} ]; do sleep 0.1; done;
                if [ {{{{ n }}}} -ge {gate} ]; then while [ ! -e {go} ]; do sleep 0.1; done; fi;
                echo "end {{{{ n }}}} $pid" >> {log}; echo {{{{ n }}}}
      out:
        compute: "{{{{ outputs.files | map(attribute='stdout') | map('trim') | list }}}}"
    edges:
      - {{from: ls, to: files}}
      - {{from: files, to: out}}
"""
EXPECTED = [str(i) for i in range(ITEMS)]


@dataclass
class Hosts:
    """Project folders with the same workflow, one store, and the host processes."""

    root: Path
    store: str | None
    folders: list[Path]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.root / "log"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("WFRUN_STORE",
                                                                 "WFRUN_CRASH_AT")}
        if self.store:
            env["WFRUN_STORE"] = self.store
        return env

    def wfrun(self, *args: str, folder: int = 0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "runner", "--project",
                               str(self.folders[folder]), *args], cwd=self.folders[folder],
                              env=self.env(), capture_output=True, text=True, timeout=120,
                              check=False)

    def host(self, name: str, folder: int, *extra: str) -> subprocess.Popen[bytes]:
        log = (self.root / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "--project", str(self.folders[folder]), "host",
             "--lease", "2", "--no-controllers", *extra],
            cwd=self.folders[folder], env=self.env(), stdout=subprocess.DEVNULL, stderr=log,
            start_new_session=True)
        log.close()
        self.procs[name] = proc
        return proc

    def start(self) -> str:
        started = self.wfrun("start", "spread", "--json")
        assert started.returncode == 0, started.stderr
        run_id: str = json.loads(started.stdout)["run_id"]
        return run_id

    def status(self, run_id: str) -> str:
        shown = self.wfrun("show", run_id, "--json")
        assert shown.returncode == 0, shown.stderr
        status: str = json.loads(shown.stdout)["status"]
        return status

    def log(self) -> list[tuple[str, str, str]]:
        if not self.log_path.exists():
            return []
        return [tuple(line.split(" ")) for line in  # type: ignore[misc]
                self.log_path.read_text().splitlines()]

    def counts(self, kind: str) -> Counter[str]:
        return Counter(n for k, n, _ in self.log() if k == kind)

    def wait_log(self, kind: str, at_least: int) -> None:
        wait_until(lambda: sum(self.counts(kind).values()) >= at_least,
                   what=lambda: f"{at_least} '{kind}' lines; log: {self.log()}")

    def running(self) -> dict[str, str]:
        """Items started and not ended: item -> the pid of the process running it."""
        out: dict[str, str] = {}
        for kind, n, pid in self.log():
            if kind == "start":
                out[n] = pid
            else:
                out.pop(n, None)
        return out

    def go(self) -> None:
        (self.root / "go").touch()

    def rows(self, run_id: str) -> list[dict[str, object]]:
        from runner.store.domain._fanout import ItemKey

        if self.store:
            from runner.store.postgres import PostgresStore

            store = PostgresStore(self.store)
        else:
            from runner.store import SqliteStore

            store = SqliteStore(self.folders[0] / ".wfrun" / "state" / "store.sqlite3")
        try:
            rows = store.fanout.items(ItemKey(run_id, "files", 1))
        finally:
            store.close()
        return [{"state": r.state, "starts": r.starts} for r in rows]

    def stop(self) -> None:
        self.go()
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=DEADLINE)


def peak(log: list[tuple[str, str, str]]) -> int:
    now = top = 0
    for kind, _, _ in log:
        now += 1 if kind == "start" else -1
        top = max(top, now)
    return top


def make(root: Path, store: str | None, folders: int) -> Hosts:
    text = textwrap.dedent(SPREAD.format(items=ITEMS, at_once=AT_ONCE, gate=GATE,
                                         log=root / "log", go=root / "go"))
    paths = []
    for i in range(folders):
        flows = root / f"h{i}" / ".wfrun" / "workflows"
        flows.mkdir(parents=True)
        (flows / "spread.yaml").write_text(text)
        paths.append(root / f"h{i}")
    return Hosts(root, store, paths)


@pytest.fixture
def sqlite_hosts(tmp_path: Path) -> Iterator[Hosts]:
    hosts = make(tmp_path, None, 1)
    yield hosts
    hosts.stop()


@pytest.fixture
def pg_hosts(tmp_path: Path, pg_cluster: PgCluster) -> Iterator[Hosts]:
    import secrets

    hosts = make(tmp_path, pg_cluster.create_schema(f"hosts_{secrets.token_hex(4)}"), 3)
    yield hosts
    hosts.stop()


def _launch(hosts: Hosts) -> tuple[str, set[str]]:
    """Start the map and its hosts: SQLite one host of two processes (a project has one
    host), Postgres three hosts. Returns the run and the host processes' pids."""
    run_id = hosts.start()
    if hosts.store is None:
        proc = hosts.host("h0", 0, "--processes", "2", "--max-runs", "4")
        pids = {str(proc.pid)}
    else:
        pids = {str(hosts.host(f"h{i}", i, "--max-runs", "2").pid) for i in range(3)}
    return run_id, pids


def _finished_once(hosts: Hosts, run_id: str) -> None:
    wait_until(lambda: hosts.status(run_id) == "completed",
               what=lambda: f"the run to complete; it is {hosts.status(run_id)}")
    shown = hosts.wfrun("show", run_id, "--json")
    assert json.loads(shown.stdout)["final_output"] == EXPECTED  # in item order


def _spreads(hosts: Hosts) -> None:
    run_id, _ = _launch(hosts)
    hosts.go()
    _finished_once(hosts, run_id)
    log = hosts.log()
    assert hosts.counts("start") == {str(i): 1 for i in range(ITEMS)}
    assert hosts.counts("end") == {str(i): 1 for i in range(ITEMS)}
    assert peak(log) <= AT_ONCE  # every host's claims counted against one ceiling
    ran_on = {pid for _, _, pid in log}
    assert len(ran_on) >= 2, ran_on  # more than one process ran items
    assert [r["starts"] for r in hosts.rows(run_id)] == [1] * ITEMS
    one = hosts.wfrun("logs", run_id, "files[7]")  # whichever host ran it
    assert one.returncode == 0, one.stderr
    assert one.stdout == "7\n"


def _killed(hosts: Hosts) -> None:
    run_id, pids = _launch(hosts)
    hosts.wait_log("end", GATE)
    hosts.wait_log("start", GATE + AT_ONCE)  # 4 items held at the gate, on their hosts
    running = hosts.running()
    if hosts.store is None:
        # The host's worker process: a runner pid that is not the host's own.
        victims = {pid for pid in running.values() if pid not in pids}
        if not victims:
            pytest.fail(f"no gated item ran in the worker process: {running}")
        victim = victims.pop()
        os.kill(int(victim), signal.SIGKILL)
    else:
        victim = next(iter(running.values()))
        name = next(n for n, p in hosts.procs.items() if str(p.pid) == victim)
        os.killpg(hosts.procs[name].pid, signal.SIGKILL)
        hosts.procs[name].wait(timeout=DEADLINE)
    interrupted = {n for n, pid in running.items() if pid == victim}
    hosts.go()
    _finished_once(hosts, run_id)
    starts = hosts.counts("start")
    assert {n for n, c in starts.items() if c > 1} <= interrupted
    assert all(starts[n] == 2 for n in interrupted)  # taken over once its lease ran out
    ends = hosts.counts("end")
    # No finished item ran again; an interrupted one may end twice at most (its orphan
    # reaped, or finishing beside the rerun if the reaping missed it).
    assert {n: c for n, c in ends.items() if n not in interrupted} == {
        str(i): 1 for i in range(ITEMS) if str(i) not in interrupted}
    assert all(1 <= ends[n] <= 2 for n in interrupted)
    rows = hosts.rows(run_id)
    assert [r["state"] for r in rows] == ["ok"] * ITEMS
    assert max(int(str(r["starts"])) for r in rows) <= 2


def _cancelled(hosts: Hosts) -> None:
    run_id, _ = _launch(hosts)
    hosts.wait_log("end", GATE)
    hosts.wait_log("start", GATE + AT_ONCE)
    cancelled = hosts.wfrun("cancel", run_id, "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    wait_until(lambda: hosts.status(run_id) == "cancelled",
               what=lambda: f"the run cancelled; it is {hosts.status(run_id)}")
    expected = ["ok"] * GATE + ["cancelled"] * (ITEMS - GATE)
    wait_until(lambda: [r["state"] for r in hosts.rows(run_id)] == expected,
               what=lambda: f"every open item cancelled: {hosts.rows(run_id)}")
    # Every running item's process was stopped on its host: none ends after the gate opens.
    wait_until(lambda: _gone(hosts), what=lambda: "the cancelled items' processes to stop")
    hosts.go()
    assert hosts.counts("end") == {str(i): 1 for i in range(GATE)}


def _gone(hosts: Hosts) -> bool:
    """No item's shell loop is left (they would write `end` once the gate opens)."""
    found = subprocess.run(["pgrep", "-f", str(hosts.root / "go")], capture_output=True,
                           text=True, check=False)
    return not found.stdout.strip()


def test_a_map_spreads_over_a_hosts_two_processes_each_item_once(
        sqlite_hosts: Hosts) -> None:
    _spreads(sqlite_hosts)


def test_a_killed_host_process_mid_map_reruns_only_its_interrupted_items(
        sqlite_hosts: Hosts) -> None:
    _killed(sqlite_hosts)


def test_cancel_mid_map_stops_items_in_every_host_process(sqlite_hosts: Hosts) -> None:
    _cancelled(sqlite_hosts)


def test_on_postgres_a_map_spreads_over_three_hosts(pg_hosts: Hosts) -> None:
    _spreads(pg_hosts)


def test_on_postgres_a_killed_host_mid_map_reruns_only_its_interrupted_items(
        pg_hosts: Hosts) -> None:
    _killed(pg_hosts)


def test_on_postgres_cancel_mid_map_stops_items_on_every_host(pg_hosts: Hosts) -> None:
    _cancelled(pg_hosts)


ONE_SLOT = """\
    name: small
    start: ls
    nodes:
      ls: {compute: "{{ range(6) | list }}"}
      files:
        map:
          over: "{{ outputs.ls }}"
          as: n
          max_concurrency: 2
          do: {action: {shell: [echo, "{{ n }}"]}}
      out: {compute: "{{ outputs.files | map(attribute='stdout') | map('trim') | list }}"}
    edges:
      - {from: ls, to: files}
      - {from: files, to: out}
"""


def test_the_parent_holds_no_slot_while_hosts_run_its_items(sqlite_hosts: Hosts) -> None:
    """A host of one slot: were the parent holding it for the node, no item could run
    in a host slot. It parks with the node open, its items run in the slot, and the
    settle that ends the last item re-queues it."""
    folder = sqlite_hosts.folders[0]
    (folder / ".wfrun" / "workflows" / "small.yaml").write_text(textwrap.dedent(ONE_SLOT))
    started = sqlite_hosts.wfrun("start", "small", "--json")
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    drained = sqlite_hosts.wfrun("host", "--once", "--max-runs", "1", "--no-controllers")
    assert drained.returncode == 0, drained.stderr
    shown = json.loads(sqlite_hosts.wfrun("show", run_id, "--json").stdout)
    assert shown["status"] == "completed"
    assert shown["final_output"] == [str(i) for i in range(6)]
    trace = [json.loads(line) for line in
             (folder / ".wfrun" / "runs" / run_id / "trace.jsonl").read_text().splitlines()]
    parked = [e["payload"]["reason"] for e in trace if e["type"] == "run_parked"]
    assert parked == ["waiting for its items (hosts run them)"]
    assert [e["type"] for e in trace].count("run_resumed") == 1
    # The items' logs, kept in the store by the host that ran them, are in the trace.
    one = sqlite_hosts.wfrun("logs", run_id, "files[3]")
    assert one.returncode == 0, one.stderr
    assert one.stdout == "3\n"
