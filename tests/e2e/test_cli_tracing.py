"""OpenTelemetry traces of runs (issue 40): real `wfrun` processes exporting over OTLP/HTTP
to a real receiver on 127.0.0.1 that decodes the protobuf (tests/fakes/otlp_receiver.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from everyday import Project, temp_project
from fakes.otlp_receiver import OtlpReceiver, Received
from waiting import DEADLINE, wait_until

WORKFLOWS = {
    # `flaky` fails its first attempt and succeeds on the retry; each attempt appends
    # the TRACEPARENT it saw.
    "traced": """\
        start: first
        nodes:
          first: {compute: "{{ 1 }}"}
          flaky:
            action:
              shell: [sh, -c, "echo \\"$TRACEPARENT\\" >> seen.txt; test -e again ||
                              { touch again; exit 1; }"]
            retry: {attempts: 2, backoff: 10ms}
        edges: [{from: first, to: flaky}]
        """,
    # `hold` waits for the file `gate` (the test kills the host meanwhile).
    "gated": """\
        start: first
        nodes:
          first: {compute: "{{ 1 }}"}
          hold:
            action: {shell: [sh, -c, "touch holding; while [ ! -e gate ]; do sleep 0.1; done"]}
          last: {compute: "{{ 2 }}"}
        edges: [{from: first, to: hold}, {from: hold, to: last}]
        """,
    "broken": """\
        start: one
        nodes:
          one: {action: {shell: [sh, -c, "exit 3"]}}
        """,
}


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    with temp_project(tmp_path / "proj", WORKFLOWS) as proj:
        yield proj


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


def otel(receiver_endpoint: str) -> dict[str, str]:
    # Spans leave the batch at once: a killed process has sent what ended before.
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver_endpoint, "OTEL_BSP_SCHEDULE_DELAY": "20"}


def named(spans: list[Received], name: str) -> list[Received]:
    return [s for s in spans if s.name == name]


def test_a_run_and_its_node_attempts_are_spans_of_one_trace(project: Project,
                                                           otlp: OtlpReceiver) -> None:
    done = project.wfrun("run", "traced", "-q", env=otel(otlp.endpoint))
    assert done.returncode == 0, done.stderr
    spans = otlp.received()  # the process flushed its spans before it exited

    [run] = named(spans, "run traced")
    assert run.parent_span_id == ""
    assert run.service == "wfrun"
    run_id = run.attributes["wfrun.run_id"]
    assert run.attributes == {"wfrun.workflow": "traced", "wfrun.run_id": run_id,
                              "wfrun.outcome": "completed"}
    [first] = named(spans, "node first")
    assert first.attributes == {"wfrun.workflow": "traced", "wfrun.run_id": run_id,
                                "wfrun.node": "first", "wfrun.node.kind": "compute",
                                "wfrun.attempt": 1, "wfrun.outcome": "ok"}
    failed, retried = sorted(named(spans, "node flaky"), key=lambda s: s.start_ns)
    assert (failed.attributes["wfrun.attempt"], failed.attributes["wfrun.outcome"]) == (1, "failed")
    assert failed.attributes["wfrun.will_retry"] is True
    assert failed.attributes["wfrun.error.code"]
    assert failed.error
    assert (retried.attributes["wfrun.attempt"], retried.attributes["wfrun.outcome"]) == (2, "ok")
    assert len(spans) == 4
    assert {s.trace_id for s in spans} == {run.trace_id}
    assert {s.parent_span_id for s in spans if s is not run} == {run.span_id}
    assert all(run.start_ns <= s.start_ns <= s.end_ns <= run.end_ns for s in spans)

    # Each shell attempt saw its own span as TRACEPARENT.
    seen = (project.root / "seen.txt").read_text().split()
    assert seen == [f"00-{run.trace_id}-{failed.span_id}-01",
                    f"00-{run.trace_id}-{retried.span_id}-01"]


def test_a_failed_run_says_so_and_no_input_is_an_attribute(project: Project,
                                                          otlp: OtlpReceiver) -> None:
    done = project.wfrun("run", "broken", "-q", "--input", '{"token": "s3cr3t-value"}',
                         env=otel(otlp.endpoint))
    assert done.returncode == 1, done.stderr
    spans = otlp.received()
    [run] = named(spans, "run broken")
    assert run.error
    assert run.attributes["wfrun.outcome"] == "failed"
    assert run.attributes["wfrun.error.code"]
    assert "s3cr3t-value" not in repr(spans)


def test_a_run_resumed_after_sigkill_continues_its_trace(project: Project,
                                                        otlp: OtlpReceiver) -> None:
    env = {**otel(otlp.endpoint), "WFRUN_LEASE_SECONDS": "1"}
    done = project.wfrun("start", "gated", "-q", env=env)
    assert done.returncode == 0, done.stderr
    host = project.host("-q", env=env)
    wait_until((project.root / "holding").exists, what="the host to run `hold`")
    wait_until(lambda: named(otlp.received(), "node first"), what="the first node's span")
    host.send_signal(signal.SIGKILL)
    host.wait(timeout=DEADLINE)

    (project.root / "gate").touch()
    again = project.host("-q", env=env)
    spans = wait_until(lambda: (s := otlp.received()) and named(s, "run gated") and s,
                       what="the resumed run's span")
    again.send_signal(signal.SIGTERM)
    assert again.wait(timeout=DEADLINE) == 0

    [run] = named(spans, "run gated")
    assert run.attributes["wfrun.outcome"] == "completed"
    assert {s.name for s in spans} >= {"node first", "node hold", "node last"}
    assert len(named(spans, "node first")) == 1  # sent by the killed host, not again
    assert {s.trace_id for s in spans} == {run.trace_id}  # one trace across two processes
    assert {s.parent_span_id for s in spans if s is not run} == {run.span_id}


AGENT = """\
#!/bin/sh
cat >/dev/null
echo "$TRACEPARENT" > agent-saw.txt
printf 'WFRUN_STEP_SUBMISSION {"action":"submit","step":"%s","attempt":"%s","output":{}}\\n' \\
  "$WFRUN_STEP" "$WFRUN_ATTEMPT"
"""


def test_a_command_agent_sees_its_steps_traceparent(project: Project,
                                                   otlp: OtlpReceiver) -> None:
    (project.root / ".wfrun" / "workflows" / "agentic.yaml").write_text(textwrap.dedent("""\
        start: think
        nodes:
          think: {agent: {prompt: "Think"}}
        """))
    agent = project.root / "agent.sh"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    done = project.wfrun("run", "agentic", "-q", "--agent", f"command:{agent}",
                         env=otel(otlp.endpoint))
    assert done.returncode == 0, done.stderr
    [think] = named(otlp.received(), "node think")
    assert think.attributes["wfrun.node.kind"] == "agent"
    assert (project.root / "agent-saw.txt").read_text().strip() == \
        f"00-{think.trace_id}-{think.span_id}-01"


class Recorder(BaseHTTPRequestHandler):
    """A real HTTP server's handler that keeps each request's headers."""

    seen: list[dict[str, str]]

    def do_GET(self) -> None:
        self.seen.append({k.lower(): v for k, v in self.headers.items()})
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []
    handler = type("Seen", (Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def test_an_http_step_sends_its_attempts_traceparent(
        project: Project, otlp: OtlpReceiver,
        recorder: tuple[str, list[dict[str, str]]]) -> None:
    url, seen = recorder
    (project.root / ".wfrun" / "workflows" / "fetch.yaml").write_text(textwrap.dedent(f"""\
        start: get
        nodes:
          get: {{action: {{call: http, with: {{url: "{url}/a"}}}}}}
          own:
            action:
              call: http
              with: {{url: "{url}/b", headers: {{TraceParent: "00-{'1' * 32}-{'2' * 16}-01"}}}}
        edges: [{{from: get, to: own}}]
        """))
    done = project.wfrun("run", "fetch", "-q", env=otel(otlp.endpoint))
    assert done.returncode == 0, done.stderr
    [get] = named(otlp.received(), "node get")
    assert get.attributes["wfrun.node.kind"] == "action"
    first, second = seen
    assert first["traceparent"] == f"00-{get.trace_id}-{get.span_id}-01"
    assert second["traceparent"] == f"00-{'1' * 32}-{'2' * 16}-01"  # the step's own wins
    # Untraced, no header.
    seen.clear()
    env = {k: "" for k in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")}
    assert project.wfrun("run", "fetch", "-q", env=env).returncode == 0
    assert "traceparent" not in seen[0]


def test_a_hosts_worker_processes_send_their_spans(project: Project,
                                                  otlp: OtlpReceiver) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint}  # the SDK's 5 s batch delay
    for _ in range(4):
        assert project.wfrun("start", "broken", "-q", env=env).returncode == 0
    done = subprocess.run(project.argv("host", "--once", "--no-controllers", "-q",
                                       "--processes", "2", "--max-runs", "2"),
                          capture_output=True, text=True, timeout=DEADLINE, cwd=project.root,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    spans = otlp.received()  # every process sent its spans before it exited
    assert len(named(spans, "run broken")) == 4
    assert len(named(spans, "node one")) == 4


def test_the_receiver_down_leaves_runs_unaffected(project: Project) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens there once it is closed
    done = project.wfrun("run", "traced", "-q", env=otel(f"http://127.0.0.1:{port}"))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert len((project.root / "seen.txt").read_text().split()) == 2  # both attempts traced
    # The spans it could not send are counted, in one line.
    assert "4 of 4 trace span(s) were not sent" in done.stderr, done.stderr


def test_a_continued_run_links_to_the_run_it_continues(project: Project,
                                                      otlp: OtlpReceiver) -> None:
    (project.root / ".wfrun" / "workflows" / "ask.yaml").write_text(textwrap.dedent("""\
        start: ask
        nodes:
          ask: {checkpoint: "Ship it?"}
          after: {compute: "{{ outputs.ask.answer }}"}
        edges: [{from: ask, to: after}]
        """))
    first = project.wfrun("run", "ask", "-q", "--json", env=otel(otlp.endpoint))
    waiting = json.loads(first.stdout)
    assert waiting["status"] == "waiting", first.stderr
    done = project.wfrun("answer", waiting["run_id"], '"yes"', "-q", "--json",
                         env=otel(otlp.endpoint))
    assert done.returncode == 0, done.stderr
    spans = otlp.received()
    parent, child = sorted(named(spans, "run ask"), key=lambda s: s.start_ns)
    assert parent.attributes["wfrun.outcome"] == "waiting"
    assert not parent.error
    assert child.attributes["wfrun.parent_run_id"] == waiting["run_id"]
    assert child.links == [(parent.trace_id, parent.span_id)]
    [after] = named(spans, "node after")
    assert (after.trace_id, after.parent_span_id) == (child.trace_id, child.span_id)


def test_without_an_endpoint_no_traceparent_is_given(project: Project) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.pop("TRACEPARENT", None)
    done = subprocess.run(project.argv("run", "traced", "-q"), capture_output=True, text=True,
                          timeout=DEADLINE, cwd=project.root, env=env)
    assert done.returncode == 0, done.stderr
    assert (project.root / "seen.txt").read_text().split() == []  # two empty lines


def test_a_bad_otel_setting_is_one_warning_and_the_run_goes_on_untraced(
        project: Project, otlp: OtlpReceiver) -> None:
    env = {**otel(otlp.endpoint), "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    done = project.wfrun("run", "traced", "-q", env=env)
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "cannot set up OpenTelemetry (OTEL_EXPORTER_OTLP_PROTOCOL=grpc: wfrun sends " \
        "traces as http/protobuf only" in line
    assert "no traces are sent" in line
    assert otlp.arrived == 0
    assert (project.root / "seen.txt").read_text().split() == []  # no TRACEPARENT either


def test_a_receiver_that_never_answers_holds_neither_the_run_nor_the_exit(
        project: Project, otlp: OtlpReceiver) -> None:
    otlp.gate = threading.Event()  # each request is taken in and never answered
    done = project.wfrun("run", "traced", "-q", env=otel(otlp.endpoint))
    assert done.returncode == 0, done.stderr
    assert len((project.root / "seen.txt").read_text().split()) == 2  # both attempts ran
    assert otlp.arrived >= 1  # the spans went out; no answer came
    assert "4 of 4 trace span(s) were not sent" in done.stderr, done.stderr
    assert otlp.received() == []
