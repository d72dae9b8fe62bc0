"""`triggers:` run by a real `wfrun host` process (DESIGN §10): `every: 1s` with
`overlap: skip` never overlaps, and `missed: last` after a SIGKILLed host fires one
catch-up. Times come from a shared clock file where the test moves time."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path

import httpx
from standalonekit import Project, wait_for
from test_webhooks import HOOKED, SECRET, post

from runner.clock import CLOCK_FILE_ENV, FileClock
from runner.launch._slots import slot_key
from runner.store import SqliteStore
from runner.store.domain._triggers import Firing

SLOW = """\
triggers:
  tick: {every: 1s, overlap: skip}
start: work
nodes:
  work: {action: {shell: [sleep, "1.5"]}}
"""

HOURLY = """\
triggers:
  hourly: {cron: "0 * * * *", missed: last, overlap: allow, input: {slot: "{{ trigger.slot }}"}}
input:
  type: object
  properties: {slot: {type: string}}
start: work
nodes:
  work: {action: {shell: [echo, "{{ input.slot }}"]}}
"""


def _firings(project: Project, workflow: str, trigger: str) -> list[Firing]:
    store = project.store()
    try:
        return store.triggers.firings(workflow, trigger, limit=10_000)
    finally:
        store.close()


def _launched(project: Project, workflow: str, trigger: str) -> list[Firing]:
    return sorted((f for f in _firings(project, workflow, trigger) if f.outcome == "launched"),
                  key=lambda f: f.slot_at or 0)


def test_every_second_with_overlap_skip_never_overlaps(project: Project) -> None:
    project.workflow("slow", SLOW)
    host = project.host("--max-runs", "4")
    project.wait_host_ready(host)
    wait_for("three runs of the 1 s trigger to end", lambda: sum(
        project.launch_status(f.run_id) == "done"
        for f in _launched(project, "slow", "tick") if f.run_id) >= 3, timeout=120)
    host.terminate()
    host.wait(timeout=30)
    launched = _launched(project, "slow", "tick")
    skipped = [f for f in _firings(project, "slow", "tick") if f.outcome == "skipped"]
    assert skipped, "a 1.5 s run under a 1 s trigger must skip slots"
    assert all(f.reason and "overlap: skip" in f.reason for f in skipped)
    records = [project.launch(f.run_id) for f in launched if f.run_id]
    for earlier, later in itertools.pairwise(records):
        # Each run was queued only after the one before it had ended.
        assert earlier.finished_at is not None
        assert later.created_at >= earlier.finished_at, (earlier, later)


def test_missed_last_after_a_killed_host_fires_one_catch_up(project: Project,
                                                            tmp_path: Path) -> None:
    project.workflow("hourly", HOURLY)
    start = datetime(2030, 1, 1, 10, 30, tzinfo=UTC).timestamp()
    clock = FileClock.create(tmp_path / "clock", start)
    env = {CLOCK_FILE_ENV: clock.path}
    host = project.host(**env)
    project.wait_host_ready(host)
    wait_for("the host to see the trigger", lambda: _state(project) is not None)
    clock.set(start + 30 * 60 + 5)  # 11:00:05
    wait_for("the 11:00 run to end", lambda: [
        project.launch_status(f.run_id) for f in _launched(project, "hourly", "hourly")
        if f.run_id] == ["done"])
    host.kill()  # SIGKILL: no parking, no goodbye
    host.wait(timeout=30)

    back = start + 3 * 86_400 + 50 * 60  # three days on, at 11:20
    clock.set(back)
    again = project.host(**env)
    project.wait_host_ready(again)
    newest = datetime(2030, 1, 4, 11, tzinfo=UTC).timestamp()
    wait_for("the outage to be evaluated", lambda: (_state(project) or 0) >= newest * 1000)
    wait_for("the catch-up run to end", lambda: all(
        project.launch_status(f.run_id) == "done"
        for f in _launched(project, "hourly", "hourly") if f.run_id))
    launched = _launched(project, "hourly", "hourly")
    assert [f.key for f in launched] == [slot_key(start + 1800), slot_key(newest)]
    trace = (project.root / ".wfrun" / "runs" / (launched[1].run_id or "") / "trace.jsonl")
    assert f'"input":{{"slot":"{slot_key(newest)}"}}' in trace.read_text()  # its own slot
    missed = [f for f in _firings(project, "hourly", "hourly") if f.outcome == "missed"]
    assert len([f for f in missed if not f.key.startswith("gap:")]) == 23
    assert next(f.reason for f in missed if f.key.startswith("gap:")).startswith("48 slot(s)")


def _state(project: Project) -> int | None:
    store: SqliteStore = project.store()
    try:
        state = store.triggers.state("hourly", "hourly")
    finally:
        store.close()
    return None if state is None else state.cursor_at


OPEN_HOOK = """\
triggers:
  push: {webhook: {path: /hooks/open}}
start: a
nodes:
  a: {action: {shell: [echo, hi]}}
"""


def test_host_listen_serves_signed_webhooks(project: Project) -> None:
    project.workflow("hooked", HOOKED)
    host = project.host("--listen", "127.0.0.1:0", PUSH_SECRET=SECRET)
    project.wait_host_ready(host)
    url = project.webhooks_url(host, "/hooks/push")
    with httpx.Client(timeout=30) as client:
        answer = post(client, url, "gh-1", {"ref": "main"})
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["run_id"]
        wait_for("the delivery's run to end", lambda: project.launch_status(run_id) == "done")
        replay = post(client, url, "gh-1", {"ref": "main"})
        assert (replay.status_code, replay.json()["run_id"]) == (200, run_id)
        assert post(client, url, "gh-2", {"ref": "x"}, secret="nope").status_code == 401
    assert [f.key for f in _firings(project, "hooked", "push")] == ["delivery:gh-1"]


def test_listen_beyond_loopback_needs_every_webhook_signed(project: Project) -> None:
    project.workflow("open", OPEN_HOOK)
    proc = project.wfrun("host", "--listen", "0.0.0.0:0")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "webhook trigger(s) open/push would accept unsigned deliveries" in proc.stderr


FILES = """\
triggers:
  edits: {files: {paths: ["src/**/*.py"], debounce: 0.3s}, input: {paths: "{{ event.paths }}"}}
input:
  type: object
  properties: {paths: {type: array, items: {type: string}}}
start: a
nodes:
  a: {action: {shell: [echo, "{{ input.paths | join(' ') }}"]}}
"""


def test_files_trigger_fires_each_change_in_one_batch(project: Project) -> None:
    project.workflow("edits", FILES)
    (project.root / "src" / "pkg").mkdir(parents=True)
    host = project.host()
    project.wait_host_ready(host)
    # The watcher starts with the host's first look at the workflows: one probe change
    # (rewritten now and then: a change made before the watch began is not seen).
    wait_for("the host to watch", lambda: _probe_change(project), every=2.0)
    written = {f"src/pkg/m{i}.py" for i in range(5)}
    for path in sorted(written):
        (project.root / path).write_text("x = 1\n")
    (project.root / "src" / "notes.txt").write_text("not python\n")

    def batched() -> set[str]:
        seen: set[str] = set()
        for firing in _launched(project, "edits", "edits"):
            record = project.launch(firing.run_id or "")
            if record.status != "done":
                return set()
            trace = project.root / ".wfrun" / "runs" / record.run_id / "trace.jsonl"
            seen |= {p for p in written | {"src/probe.py"} if p in trace.read_text()}
        return seen
    wait_for("every change to be in a finished run", lambda: written <= batched())
    launched = _launched(project, "edits", "edits")
    texts = [(project.root / ".wfrun" / "runs" / (f.run_id or "") / "trace.jsonl").read_text()
             for f in launched]
    for path in written:  # each change in exactly one batch
        assert sum(path in t for t in texts) == 1, path
    assert not any("notes.txt" in t for t in texts)  # not a match of the globs
    assert not any(".wfrun" in f.key for f in launched)


def _probe_change(project: Project) -> bool:
    """Whether a batch fired yet; if not, touch a matching file again."""
    if _launched(project, "edits", "edits"):
        return True
    (project.root / "src" / "probe.py").write_text("")
    return False
