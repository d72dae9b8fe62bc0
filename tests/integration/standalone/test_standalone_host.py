"""`wfrun host` with real processes and a real store (DESIGN §8): the project lock,
recovery after SIGKILL with orphan reaping, parking on SIGTERM, `--once` draining a
queue, and a controller reconciled under the host."""

from __future__ import annotations

import json
import signal
import textwrap

import pytest
from standalonekit import Project, group_gone, pgid_of, pid_gone, wait_for
from waiting import DEADLINE

from runner.host.runtime._views import show_run

pytestmark = pytest.mark.slow
LEASE = {"WFRUN_LEASE_SECONDS": "1.5"}


def test_a_second_host_refuses_with_one_line_naming_the_holder(project: Project) -> None:
    first = project.host("--no-controllers")
    project.wait_host_ready(first)

    second = project.wfrun("host", "--once", "--no-controllers")

    assert second.returncode == 2
    assert second.stdout == ""
    assert second.stderr.splitlines() == [
        f"wfrun: error: another wfrun host is running for this project (pid {first.pid}); "
        "stop it first, or give it more slots or cores (--max-runs, --processes); "
        "hosts share one queue only on Postgres, each in its own project folder"]
    assert first.poll() is None
    assert project.lock_pid() == first.pid
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=10) == 0
    again = project.wfrun("host", "--once", "--no-controllers")
    assert again.returncode == 0, again.stderr  # the lock went with its holder


def test_sigkill_mid_run_a_new_host_reaps_the_orphan_and_finishes_the_run_once(
        project: Project) -> None:
    [run_id] = project.queue("three", [{}])  # b's first attempt waits (b.hold.1)
    first = project.host("--no-controllers", **LEASE)
    orphan = wait_for("node b to start its waiter", project.sleep_pid)
    assert project.counts() == {"a": 1, "b-start": 1}
    group = pgid_of(orphan)
    assert group != orphan  # the waiter is a grandchild: the group's leader is b's shell
    # The host records a group right after spawning it; kill only once it has.
    wait_for("the host to record b's group", lambda: group in project.registered_groups())

    first.kill()  # SIGKILL: no parking, no cleanup
    first.wait(timeout=DEADLINE)
    assert not pid_gone(orphan), "the shell's group outlives a SIGKILLed host"
    assert project.launch_status(run_id) == "running"  # still claimed by the dead host
    second = project.host("--no-controllers", **LEASE)

    wait_for("the new host to reap the orphaned group", lambda: group_gone(group))
    wait_for("the resumed run to finish", lambda: project.launch_status(run_id) == "done")
    # The rerun of b released the first attempt: had the orphan been alive then (not
    # reaped before the rerun), it would have written a second `b` or still be running.
    assert not (project.root / "b.hold.1").exists()
    assert group_gone(group)
    assert project.counts() == {"a": 1, "b-start": 2, "b": 1, "c": 1}
    assert project.manifest(run_id)["status"] == "completed"
    record = project.launch(run_id)
    assert record.runner_id is not None
    assert record.runner_id.endswith(f":{second.pid}")
    assert record.epoch == 2  # claimed twice: by the dead host, then after its lease ran out
    types = project.trace_types(run_id)
    assert types.count("node_started") == 4
    assert types[-1] == "run_completed"
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=DEADLINE) == 0
    assert "reaped 1 orphan group(s)" in project.stderr_of(second)


def test_sigterm_parks_the_in_flight_run_and_a_later_host_finishes_it(
        project: Project) -> None:
    [run_id] = project.queue("three", [{}])  # b's first attempt waits (b.hold.1)
    host = project.host("--no-controllers")
    sleeper = wait_for("node b to start its waiter", project.sleep_pid)

    # b never ends by itself: a host that waited for it would not stop in time.
    host.send_signal(signal.SIGTERM)
    assert host.wait(timeout=DEADLINE) == 0

    assert project.launch_status(run_id) == "parked"
    assert project.manifest(run_id)["status"] == "running"  # parked, not ended
    assert "run_completed" not in project.trace_types(run_id)
    assert show_run(project.root / ".wfrun" / "runs", run_id)["status"] == "running"
    wait_for("the stopped node's group to be killed", lambda: pid_gone(sleeper))
    assert project.counts() == {"a": 1, "b-start": 1}
    assert "1 run(s) started: 1 parked" in project.stderr_of(host)

    later = project.wfrun("host", "--once", "--no-controllers", timeout=DEADLINE)

    assert later.returncode == 0, later.stderr
    assert project.launch_status(run_id) == "done"
    assert project.manifest(run_id)["status"] == "completed"
    assert project.counts() == {"a": 1, "b-start": 2, "b": 1, "c": 1}


def test_once_drains_a_queue_of_50_detached_launches(project: Project) -> None:
    ids = project.queue("tiny", [{"n": i} for i in range(50)])

    done = project.wfrun("host", "--once", "--max-runs", "8", "--no-controllers", timeout=60)

    assert done.returncode == 0, done.stderr
    assert "50 run(s) started: 50 completed" in done.stderr
    assert done.stderr.count(" completed\n") >= 50  # one line per finished run
    store = project.store()
    try:
        assert {r.run_id for r in store.launches.query(statuses=["done"])} == set(ids)
        assert store.launches.query(statuses=["queued", "starting", "running", "parked",
                                              "failed"]) == []
    finally:
        store.close()
    runs = project.root / ".wfrun" / "runs"
    for i, run_id in enumerate(ids):
        view = show_run(runs, run_id)
        assert view["status"] == "completed"
        assert view["final_output"] == {"n": i, "next": i + 1}


CONTROLLER = """\
    description: Sets Ready=True on its first pass.
    reconcile: ./hook.py:reconcile
    timeout: 10s
    spec:
      type: object
      properties: {note: {type: string}}
"""
HOOK = """\
    import os

    from runner.controllers import Condition


    def reconcile(ctx, resource):
        with open(os.path.join(os.path.dirname(__file__), "passes.log"), "a") as f:
            f.write(f"{os.getpid()} {resource.key}\\n")
        return ctx.settled({"note": resource.spec.get("note")},
                           [Condition("Ready", "True", "Reconciled", "first pass")])
"""


def test_a_controller_resource_reaches_ready_under_the_host(project: Project) -> None:
    folder = project.root / ".wfrun" / "controllers"
    folder.mkdir()
    (folder / "ready.yaml").write_text(textwrap.dedent(CONTROLLER))
    (folder / "hook.py").write_text(textwrap.dedent(HOOK))
    (project.root / "spec.yaml").write_text("note: hello\n")
    listed = json.loads(project.wfrun("controllers", "--json").stdout)["controllers"]
    assert any(c["name"] == "ready" and c["valid"] for c in listed)
    host = project.host()
    project.wait_host_ready(host)

    applied = project.wfrun("controller", "ready", "apply", "k1", "spec.yaml")
    assert applied.returncode == 0, applied.stderr

    def ready() -> dict[str, object] | None:
        store = project.store()
        try:
            resource = store.resources.get("ready", "k1")
        finally:
            store.close()
        conditions = resource.status.get("conditions") or [] if resource else []
        return next((c for c in conditions if c["type"] == "Ready" and c["status"] == "True"),
                    None)

    condition = wait_for("Ready=True", ready, timeout=20)
    assert condition["reason"] == "Reconciled"
    passes = (folder / "passes.log").read_text().split()
    assert passes[:2] == [str(host.pid), "k1"]  # reconciled inside the host process
    host.send_signal(signal.SIGTERM)
    assert host.wait(timeout=10) == 0
