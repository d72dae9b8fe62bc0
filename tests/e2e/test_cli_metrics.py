"""`wfrun host --metrics`: a real host process serving /metrics, scraped over HTTP and
parsed with Prometheus' own parser after a known set of runs (issue 40)."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from everyday import Project, temp_project
from prometheus_client.parser import text_string_to_metric_families
from waiting import DEADLINE, LineReader, wait_until

from runner.store import LaunchRecord, SqliteStore

WORKFLOWS = {
    "ok": """\
        start: one
        nodes:
          one: {compute: "{{ 1 }}"}
        """,
    "fails": """\
        start: one
        nodes:
          one: {action: {shell: [sh, -c, "exit 3"]}}
        """,
    # The first attempt fails (and leaves the marker), the retry succeeds: two attempts.
    "flaky": """\
        start: one
        nodes:
          one:
            action: {shell: [sh, -c, "test -e flaky-marker || { touch flaky-marker; exit 1; }"]}
            retry: {attempts: 2, backoff: 10ms}
        """,
}
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "controllers" / "project"
RUNS = {"ok": 3, "fails": 2, "flaky": 1}
# `hold` waits for the file `gate` (never made: the test takes its claim away).
HOLD = """\
    start: hold
    nodes:
      hold:
        action: {shell: [sh, -c, "touch holding; while [ ! -e gate ]; do sleep 0.1; done"]}
    """

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    with temp_project(tmp_path / "proj", WORKFLOWS) as proj:
        yield proj


def serving(proc: subprocess.Popen[str]) -> str:
    """The /metrics URL a host prints once it serves it."""
    assert proc.stderr is not None
    return LineReader(proc.stderr).wait_for(r"metrics on http://").split("metrics on ", 1)[1]


def scrape(url: str) -> Samples:
    text = httpx.get(url, timeout=10).text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def enqueue(project: Project) -> None:
    for name, count in RUNS.items():
        for _ in range(count):
            done = project.wfrun("start", name, "-q")
            assert done.returncode == 0, done.stderr


def ended(samples: Samples) -> float:
    return sum(v for (name, _), v in samples.items() if name == "wfrun_runs_ended_total")


@pytest.mark.parametrize("processes", [1, 2])
def test_metrics_count_exactly_the_runs_a_host_ran(project: Project, processes: int) -> None:
    enqueue(project)
    host = project.host("--metrics", "127.0.0.1:0", "--max-runs", "2",
                        "--processes", str(processes), stderr=subprocess.PIPE)
    url = serving(host)
    assert url.startswith("http://127.0.0.1:")
    assert url.endswith("/metrics")

    samples = wait_until(lambda: (s := scrape(url)) and ended(s) == sum(RUNS.values()) and s,
                         what="the host to end every run")
    for name, count in RUNS.items():
        assert value(samples, "wfrun_runs_started_total", workflow=name) == count
    assert value(samples, "wfrun_runs_ended_total", workflow="ok", status="completed") == 3
    assert value(samples, "wfrun_runs_ended_total", workflow="fails", status="failed") == 2
    assert value(samples, "wfrun_runs_ended_total", workflow="flaky", status="completed") == 1
    assert ended(samples) == 6  # and no other status
    assert value(samples, "wfrun_claim_latency_seconds_count") == 6
    node = "wfrun_node_duration_seconds_count"
    assert value(samples, node, workflow="ok", kind="compute", outcome="ok") == 3
    assert value(samples, node, workflow="fails", kind="action", outcome="failed") == 2
    # The retried node: its failed attempt and its successful one, each measured.
    assert value(samples, node, workflow="flaky", kind="action", outcome="failed") == 1
    assert value(samples, node, workflow="flaky", kind="action", outcome="ok") == 1
    assert sum(v for (n, _), v in samples.items() if n == node) == 7
    assert value(samples, "wfrun_queue_depth", state="done") == 4
    assert value(samples, "wfrun_queue_depth", state="failed") == 2
    assert value(samples, "wfrun_queue_depth", state="queued") == 0
    assert not [k for k in samples if k[0] == "wfrun_lease_losses_total"]
    assert not [k for k in samples if k[0] == "wfrun_controller_passes_total"]  # none run

    host.send_signal(signal.SIGTERM)
    assert host.wait(timeout=DEADLINE) == 0
    with pytest.raises(httpx.TransportError):  # the server went with the host
        httpx.get(url, timeout=5)


def test_a_run_whose_claim_is_taken_is_a_lease_loss(project: Project) -> None:
    (project.root / ".wfrun" / "workflows" / "hold.yaml").write_text(textwrap.dedent(HOLD))
    done = project.wfrun("start", "hold", "-q")
    assert done.returncode == 0, done.stderr
    host = project.host("--metrics", "127.0.0.1:0", "--lease", "1.5", stderr=subprocess.PIPE)
    url = serving(host)
    wait_until((project.root / "holding").exists, what="the host to run `hold`")
    store_file = project.root / ".wfrun" / "state" / "store.sqlite3"
    with sqlite3.connect(store_file) as conn:  # its lease runs out ...
        conn.execute("UPDATE workflow_run_queue SET claim_expires_at = 1")
    conn.close()
    thief = SqliteStore(store_file)
    try:  # ... and another runner takes it: the host's keeper notices and lets go
        [row] = thief.launches.query()
        assert isinstance(thief.launches.claim(row.run_id, runner_id="thief"), LaunchRecord)
    finally:
        thief.close()
    samples = wait_until(lambda: (s := scrape(url)) and value(
        s, "wfrun_lease_losses_total", workflow="hold") and s, what="the lease loss")
    assert value(samples, "wfrun_lease_losses_total", workflow="hold") == 1
    assert value(samples, "wfrun_runs_started_total", workflow="hold") == 1
    assert ended(samples) == 0  # let go is not an end: the thief carries the run on
    assert value(samples, "wfrun_queue_depth", state="running") == 1  # the thief's
    host.send_signal(signal.SIGTERM)
    assert host.wait(timeout=DEADLINE) == 0


def test_controller_passes_are_counted(project: Project) -> None:
    shutil.copytree(FIXTURES / "controllers", project.root / ".wfrun" / "controllers")
    spec = project.root / "probe.json"
    spec.write_text("{}")
    done = project.wfrun("controller", "apply", "probe", "p1", str(spec))
    assert done.returncode == 0, done.stderr
    proc = project.spawn("host", "--metrics", ":0", stderr=subprocess.PIPE)
    url = serving(proc)
    wait_until(lambda: (value(scrape(url), "wfrun_controller_passes_total") or 0) >= 1,
               what="the controller's pass to be counted")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0


@pytest.mark.parametrize(("address", "says"), [
    ("0.0.0.0:9464", "is not a loopback address"),
    ("10.1.2.3:9464", "--metrics-public"),
    ("127.0.0.1:99999", "a port from 0 to 65535"),
    ("example.org:80", "is not an IP address"),
])
def test_a_bad_metrics_address_is_one_line_and_nothing_runs(project: Project, address: str,
                                                            says: str) -> None:
    done = project.wfrun("host", "--once", "--metrics", address)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert says in done.stderr
    assert not (project.root / ".wfrun" / "state" / "host.lock").exists()


def test_a_public_address_is_served_when_allowed(project: Project) -> None:
    host = project.host("--metrics", "0.0.0.0:0", "--metrics-public", stderr=subprocess.PIPE)
    url = serving(host)
    port = url.rsplit(":", 1)[1].split("/")[0]
    assert "process_cpu_seconds_total" in httpx.get(f"http://127.0.0.1:{port}/metrics",
                                                    timeout=10).text
    host.send_signal(signal.SIGTERM)
    assert host.wait(timeout=DEADLINE) == 0


def test_a_taken_port_is_one_line(project: Project) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = project.wfrun("host", "--once", "--metrics", f"127.0.0.1:{port}")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
