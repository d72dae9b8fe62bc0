"""Issue 37, "Prove it": maps and parallel nodes run through real `wfrun` processes,
with their items durable in the store (ADR 0008)."""

from __future__ import annotations

import json

from fanoutkit import AT_ONCE, EXPECTED, GATE, ITEMS, Project, peak
from waiting import wait_until


def test_a_map_of_50_shell_items_runs_4_at_a_time_each_once_outputs_in_order(
        project: Project) -> None:
    project.go()  # no gate: every item runs through
    outcome = project.finish(project.start("fifty"))
    assert outcome["status"] == "completed", outcome
    assert outcome["final_output"] == EXPECTED  # in item order, whatever order they ended
    log = project.log()
    assert project.counts("start") == {str(i): 1 for i in range(ITEMS)}
    assert project.counts("end") == {str(i): 1 for i in range(ITEMS)}
    # Each item waits until 4 have started, so fewer than 4 at once would never end;
    # the store's claim keeps it at 4.
    assert peak(log) == AT_ONCE
    run_id = project.only_run()
    one = project.wfrun("logs", run_id, "files[7]")
    assert one.returncode == 0, one.stderr
    assert one.stdout == "7\n"  # that item's output alone; headers on stderr
    assert "files[7] stdout" in one.stderr
    shown = project.wfrun("show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    files = next(e for e in json.loads(shown.stdout)["timeline"] if e["node"] == "files")
    assert files["items"] == {"ok": ITEMS}


def test_a_killed_runner_resumes_the_map_without_rerunning_a_finished_item(
        project: Project) -> None:
    proc = project.start("fifty")
    project.wait_log("end", GATE)  # items 0..9 ended ...
    project.wait_log("start", GATE + AT_ONCE)  # ... and 10..13 run, held at the gate
    run_id = project.only_run()
    project.kill(proc)
    resumed = project.resume(run_id)
    # The resume reaps the dead runner's item processes, then starts those items again.
    project.wait_log("start", GATE + 2 * AT_ONCE)
    project.go()
    outcome = project.finish(resumed)
    assert outcome["status"] == "completed", outcome
    assert outcome["final_output"] == EXPECTED
    interrupted = {str(i) for i in range(GATE, GATE + AT_ONCE)}
    assert project.counts("start") == {str(i): 2 if str(i) in interrupted else 1
                                       for i in range(ITEMS)}
    assert project.counts("end") == {str(i): 1 for i in range(ITEMS)}  # orphans reaped
    items = project.items(run_id, "files")
    assert [i["state"] for i in items] == ["ok"] * ITEMS
    assert [i["starts"] for i in items] == [2 if str(i) in interrupted else 1
                                            for i in range(ITEMS)]


def test_a_killed_host_is_taken_over_mid_map_and_no_finished_item_runs_again(
        project: Project) -> None:
    started = project.wfrun("start", "fifty", "--json")
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    first = project.host()
    project.wait_log("end", GATE)
    project.wait_log("start", GATE + AT_ONCE)
    # Each slot holds one more item claimed ahead (ADR 0014) once its commit is in.
    wait_until(lambda: len(project.held_ahead(run_id, "files")) == AT_ONCE,
               what=lambda: f"{AT_ONCE} items claimed ahead; {project.items(run_id, 'files')}")
    project.kill_group(first)  # the host and its own process group; items run on
    # What the dead host left: the items it ran (held at the gate) and those its slots
    # held claimed ahead (their start counted, never run), whichever they are.
    interrupted, ahead = project.running(), project.held_ahead(run_id, "files")
    assert len(interrupted) == AT_ONCE
    assert len(ahead) == AT_ONCE
    assert not interrupted & ahead
    second = project.host()  # reaps the dead host's item processes, takes the run over
    project.wait_log("start", GATE + 2 * AT_ONCE)
    project.go()
    wait_until(lambda: project.status(run_id) == "completed",
               what=lambda: f"the run to complete; it is {project.status(run_id)}")
    project.kill_group(second)
    assert project.counts("start") == {str(i): 2 if str(i) in interrupted else 1
                                       for i in range(ITEMS)}
    # Every item once; one that was running when its host died at most twice (its
    # orphaned process may finish beside the rerun if the new host's reaping misses it).
    ends = project.counts("end")
    assert {i: n for i, n in ends.items() if i not in interrupted} == {
        str(i): 1 for i in range(ITEMS) if str(i) not in interrupted}
    assert all(1 <= ends[i] <= 2 for i in interrupted)
    assert [i["starts"] for i in project.items(run_id, "files")] == [
        2 if str(i) in interrupted | ahead else 1 for i in range(ITEMS)]


def test_cancel_mid_map_cancels_every_running_item(project: Project) -> None:
    proc = project.start("fifty")
    project.wait_log("start", GATE + AT_ONCE)
    run_id = project.only_run()
    # While it runs, `show` counts the items from the store: done, running, pending
    # (an item's end line comes a moment before its row is written).
    expected = {"ok": GATE, "running": AT_ONCE, "pending": ITEMS - GATE - AT_ONCE}
    wait_until(lambda: project.shown_items(run_id, "files") == expected,
               what=lambda: f"{expected}; shown {project.shown_items(run_id, 'files')}")
    status = project.wfrun("status", run_id, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["items"]["files"] == expected  # `workflow status` too
    cancelled = project.wfrun("cancel", run_id, "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    outcome = project.finish(proc)
    assert outcome["status"] == "cancelled", outcome
    project.go()
    assert project.counts("end") == {str(i): 1 for i in range(GATE)}  # none ended after
    items = project.items(run_id, "files")
    assert [i["state"] for i in items] == ["ok"] * GATE + ["cancelled"] * (ITEMS - GATE)
    assert max(i["starts"] for i in items) == 1


def test_parallel_fail_fast_cancels_the_rest_and_routes_by_result(project: Project) -> None:
    outcome = project.finish(project.start("reviews"))
    assert outcome["status"] == "completed", outcome
    report = outcome["final_output"]
    assert report["error"] == "items_failed"
    broken, quick, slow = report["branches"]  # by name
    assert (broken, slow) == ("failed", "cancelled")
    # `quick` (a compute) races the failing shell branch on its own thread: ended
    # first it keeps its output, else fail_fast cancels it like any branch still open.
    assert (quick, report["outputs"]["quick"]) in (("ok", "fine"), ("cancelled", None))
    assert report["outputs"]["broken"] is None
    assert report["outputs"]["slow"] is None
    project.go()
    assert project.counts("end") == {}  # the slow branch was stopped, not left running


def test_on_postgres_a_killed_runner_resumes_the_map_without_rerunning_a_finished_item(
        pg_project: Project) -> None:
    test_a_killed_runner_resumes_the_map_without_rerunning_a_finished_item(pg_project)


def test_a_workflow_branch_runs_as_a_linked_child_run(project: Project) -> None:
    outcome = project.finish(project.start("withchild"))
    assert outcome["status"] == "completed", outcome
    parent = outcome["run_id"]
    assert outcome["final_output"] == {"style": "hi ada", "quick": 1}
    runs = {r["run_id"]: r for r in project.listed()}
    children = [r for r in runs if r != parent]
    assert len(children) == 1
    (child,) = children
    assert child.startswith(parent + "-")  # its id is fixed by the item: a resume finds it
    assert runs[child]["workflow"] == "stylecheck"
    shown = project.wfrun("show", parent, "--json")
    assert shown.returncode == 0, shown.stderr
    outputs = json.loads(shown.stdout)["outputs"]
    assert outputs["both"] == {"style": "hi ada", "quick": 1}


def test_graph_draws_a_maps_body_and_a_parallels_branches(project: Project) -> None:
    drawn = project.wfrun("graph", "reviews")
    assert drawn.returncode == 0, drawn.stderr
    assert "⫴ reviews [parallel]" in drawn.stdout
    assert "| branch broken: $ action" in drawn.stdout
    assert "| branch quick: ƒ compute" in drawn.stdout
    mapped = project.wfrun("graph", "fifty")
    assert "| each n (max 4 at once): $ action" in mapped.stdout
    child = project.wfrun("graph", "withchild")
    assert "| branch style: workflow stylecheck" in child.stdout


def test_on_postgres_cancel_mid_map_cancels_every_running_item(pg_project: Project) -> None:
    test_cancel_mid_map_cancels_every_running_item(pg_project)


def test_on_postgres_a_map_of_50_items_runs_4_at_a_time(pg_project: Project) -> None:
    test_a_map_of_50_shell_items_runs_4_at_a_time_each_once_outputs_in_order(pg_project)
