"""Issue 39 item 1 for fan-out: a rerun of a run whose map had some items finish and
one fail reuses the finished items' recorded outputs (they do not run again: each
item appends its name to a counter file) and runs only the others (pgflow#658)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from everyday import Project
from waiting import wait_until

MAP = """\
    input:
      type: object
      properties: {names: {type: array, items: {type: string}}}
    start: files
    nodes:
      files:
        map:
          over: "{{ input.names }}"
          as: name
          max_concurrency: 2
          do:
            action:
              shell: [sh, -c, "echo {{ name }} >> ran.txt;
                      if [ {{ name }} = c ] && [ ! -f fixed ]; then exit 3; fi; echo {{ name }}"]
      after:
        compute: "{{ outputs.files | map(attribute='stdout') | join('') }}"
    edges:
      - {from: files, to: after}
    """

PARALLEL = """\
    start: reviews
    nodes:
      reviews:
        parallel:
          fail_fast: false
          branches:
            style: {action: {shell: [sh, -c, "echo style >> ran.txt; echo s"]}}
            safety: {action: {shell: [sh, -c, "echo safety >> ran.txt; test -f fixed"]}}
    """


@pytest.fixture
def project(tmp_path: Path) -> Project:
    p = Project(tmp_path / "proj")
    p.workflow("files", MAP)
    p.workflow("reviews", PARALLEL)
    return p


def _ran(project: Project) -> list[str]:
    path = project.root / "ran.txt"
    return sorted(path.read_text().split()) if path.exists() else []


def _failed_map_run(project: Project, names: list[str]) -> str:
    done = project.wfrun("run", "files", "--input", json.dumps({"names": names}),
                         "--json", "-q")
    assert done.returncode == 1, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["error"]["node"] == "files", outcome["error"]
    return str(outcome["run_id"])


def test_a_rerun_of_a_failed_map_runs_only_the_items_that_did_not_end_ok(
        project: Project) -> None:
    old = _failed_map_run(project, ["a", "b", "c", "d"])
    assert _ran(project) == ["a", "b", "c", "d"]
    (project.root / "fixed").touch()
    done = project.wfrun("rerun", old, "--json")  # from the failed node: the map
    assert done.returncode == 0, done.stderr
    assert f"rerun of {old} from node files (reused: 3 ended items of files)" in done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "completed"
    assert outcome["final_output"] == "a\nb\nc\nd\n"  # outputs in item order, reused or not
    # a, b and d ended ok before: only c ran again.
    assert _ran(project) == ["a", "b", "c", "c", "d"]
    shown = project.json("show", outcome["run_id"], "--json")
    assert shown["rerun"]["from"] == "files"
    assert shown["rerun"]["reused_items"] == {"files": ["0", "1", "3"]}
    assert [(e["node"], e.get("items")) for e in shown["timeline"]] == [
        ("files", {"ok": 4}), ("after", None)]
    assert "reused 3 ended items of files" in project.wfrun("show", outcome["run_id"]).stdout
    # Each item's result says where it came from; a reused one was not started here.
    trace = project.root / ".wfrun" / "runs" / outcome["run_id"] / "trace.jsonl"
    end = next(e for e in map(json.loads, trace.read_text().splitlines())
               if e["type"] == "node_finished" and e["node"] == "files")
    assert [(i["outcome"], i.get("reused_from"), i["starts"])
            for i in end["payload"]["items"]] == [
        ("ok", old, 0), ("ok", old, 0), ("ok", None, 1), ("ok", old, 0)]
    # Naming the map with --from reuses the same way; the old run is unchanged by both.
    again = project.wfrun("rerun", old, "--from", "files", "--json", "-q")
    assert again.returncode == 0, again.stderr
    assert _ran(project) == ["a", "b", "c", "c", "c", "d"]


def test_a_new_input_or_a_changed_map_reuses_no_item(project: Project) -> None:
    old = _failed_map_run(project, ["a", "b", "c"])
    (project.root / "fixed").touch()
    # Another list: item 0 is another item now, so nothing is reused.
    done = project.wfrun("rerun", old, "--input", '{"names": ["b", "a", "c"]}', "--json",
                         "-q")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_output"] == "b\na\nc\n"
    assert _ran(project) == ["a", "a", "b", "b", "c", "c"]
    # The same input given again is the same input: reused.
    done = project.wfrun("rerun", old, "--input", '{"names": ["a", "b", "c"]}', "--json",
                         "-q")
    assert done.returncode == 0, done.stderr
    assert _ran(project) == ["a", "a", "b", "b", "c", "c", "c"]
    # A changed body, forced: its items' old outputs are not its outputs.
    project.workflow("files", MAP.replace("echo {{ name }}\"]", "echo new-{{ name }}\"]"))
    done = project.wfrun("rerun", old, "--force", "--json", "-q")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_output"] == "new-a\nnew-b\nnew-c\n"
    assert _ran(project) == ["a", "a", "a", "b", "b", "b", "c", "c", "c", "c"]


def test_a_rerun_of_a_parallel_node_runs_only_the_failed_branch(project: Project) -> None:
    done = project.wfrun("run", "reviews", "--json", "-q")
    assert done.returncode == 1, done.stderr
    old = json.loads(done.stdout)["run_id"]
    assert _ran(project) == ["safety", "style"]
    (project.root / "fixed").touch()
    done = project.wfrun("rerun", old, "--json", "-q")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_output"]["style"]["stdout"] == "s\n"
    assert _ran(project) == ["safety", "safety", "style"]


def test_a_rerun_on_a_host_whose_items_any_host_may_claim_reuses_them_too(
        project: Project) -> None:
    """Shell items of a host's run are claimed by host item workers (ADR 0008 phase 2):
    the reused ones are ended before the node is shared, so no worker runs them."""
    old = _failed_map_run(project, ["a", "b", "c", "d"])
    (project.root / "fixed").touch()
    queued = project.json("rerun", old, "--detach", "--json")
    host = subprocess.Popen(project.argv("host", "--no-controllers", "-q"), cwd=project.root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: project.json("status", queued["run_id"], "--json")["status"]
                   == "completed", what="the rerun to complete on the host")
    finally:
        host.send_signal(signal.SIGTERM)
        host.wait(timeout=60)
    assert _ran(project) == ["a", "b", "c", "c", "d"]
