"""Issue 39 item 1: `wfrun rerun RUN [--from NODE] [--set NODE=JSON] [--force]`.

A 3-step run fails at step 2 because the world is not ready (a file is missing);
once it is, a rerun reuses step 1 (its side effect, a line appended to a file,
happens once), runs step 2 and step 3, and the two runs are linked both ways.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
from pathlib import Path

import pytest
from everyday import Project
from pgcluster import PgCluster

from tests.waiting import wait_until

FLOW = """\
    input: {type: object, properties: {who: {type: string}}}
    start: one
    nodes:
      one:
        action: {shell: [sh, -c, "echo once >> count.txt; echo one"]}
      two:
        action:
          shell: [sh, -c, "touch two.started; while [ ! -f go ]; do sleep 0.1; done;
                  test -f fixed && echo two"]
      three:
        action: {shell: [sh, -c, "echo three >> three.txt; echo {{ input.who | default('x') }}"]}
    edges:
      - {from: one, to: two}
      - {from: two, to: three}
    """

REVIEW = """\
    start: fetch
    nodes:
      fetch:
        action: {shell: [sh, -c, "echo fetched >> count.txt; echo diff"]}
      review:
        agent:
          prompt: "Review {{ outputs.fetch.stdout }}"
          output:
            type: object
            required: [verdict]
            properties: {verdict: {enum: [approve, reject]}}
      decide:
        action: {shell: [sh, -c, "test -f fixed && echo {{ outputs.review.verdict }}"]}
    edges:
      - {from: fetch, to: review}
      - {from: review, to: decide}
    """


@pytest.fixture
def project(tmp_path: Path) -> Project:
    p = Project(tmp_path / "proj")
    p.workflow("three", FLOW)
    (p.root / "go").touch()
    return p


def _failed_run(project: Project) -> str:
    done = project.wfrun("run", "three", "--json", "-q")
    assert done.returncode == 1, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["error"]["node"] == "two"
    return str(outcome["run_id"])


def _lines(project: Project, name: str) -> list[str]:
    path = project.root / name
    return path.read_text().splitlines() if path.exists() else []


def test_rerun_reuses_step_one_runs_two_and_three_and_links_both_ways(
        project: Project) -> None:
    old = _failed_run(project)
    assert _lines(project, "count.txt") == ["once"]
    (project.root / "fixed").touch()
    done = project.wfrun("rerun", old, "--json")
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    new = outcome["run_id"]
    assert outcome["status"] == "completed"
    assert f"rerun of {old} from node two (reused: one)" in done.stderr
    # Step 1's side effect happened once; step 3 ran.
    assert _lines(project, "count.txt") == ["once"]
    assert _lines(project, "three.txt") == ["three"]
    shown = project.json("show", new, "--json")
    assert shown["rerun_of"] == old
    assert shown["rerun"]["from"] == "two"
    assert shown["rerun"]["reused"] == ["one"]
    assert shown["rerun"]["forced"] is False
    assert [(e["node"], e.get("reused_from")) for e in shown["timeline"]] == [
        ("one", old), ("two", None), ("three", None)]
    assert shown["outputs"]["one"]["stdout"] == "one\n"
    assert project.json("show", old, "--json")["rerun_by"] == [new]
    text = project.wfrun("show", new)
    assert f"rerun of {old} from node two" in text.stdout
    assert "ok (reused)" in text.stdout
    assert f"rerun by {new}" in project.wfrun("show", old).stdout
    # A launch like any run: the run list and status see it.
    assert new in [r["run_id"] for r in project.runs()]
    assert project.json("status", new, "--json")["status"] == "completed"


def test_rerun_from_a_node_executes_from_there(project: Project) -> None:
    (project.root / "fixed").touch()
    done = project.wfrun("run", "three", "--json", "-q")
    assert done.returncode == 0, done.stderr
    old = json.loads(done.stdout)["run_id"]
    # A completed run has no failed node: naming none is refused, saying what to do.
    refused = project.wfrun("rerun", old)
    assert refused.returncode == 2
    assert "--from NODE" in refused.stderr
    done = project.wfrun("rerun", old, "--from", "one", "--json", "-q")
    assert done.returncode == 0, done.stderr
    assert _lines(project, "count.txt") == ["once", "once"]  # step 1 ran again
    done = project.wfrun("rerun", old, "--from", "three", "--input", '{"who": "ada"}',
                         "--json", "-q")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["final_output"]["stdout"] == "ada\n"
    assert _lines(project, "count.txt") == ["once", "once"]
    assert _lines(project, "three.txt") == ["three"] * 3
    assert len(project.json("show", old, "--json")["rerun_by"]) == 2
    # Queued for a host: linked at once, before any host runs it.
    queued = project.json("rerun", old, "--from", "two", "--detach", "--json")
    assert (queued["status"], queued["rerun_of"], queued["from"]) == ("queued", old, "two")
    shown = project.json("show", queued["run_id"], "--json")
    assert (shown["status"], shown["rerun_of"]) == ("queued", old)
    assert queued["run_id"] in project.json("show", old, "--json")["rerun_by"]
    # A host activates it from its plan, as any launch.
    hosted = project.wfrun("host", "--once", "--no-controllers")
    assert hosted.returncode == 0, hosted.stderr
    shown = project.json("show", queued["run_id"], "--json")
    assert (shown["status"], shown["rerun"]["reused"]) == ("completed", ["one"])
    assert _lines(project, "count.txt") == ["once", "once"]
    assert _lines(project, "three.txt") == ["three"] * 4
    for args, words in [(("--from", "nope"), "has no node 'nope'"),
                        (("--from", "two", "--input", '{"who": 3}'), "does not match")]:
        bad = project.wfrun("rerun", old, *args)
        assert bad.returncode == 2, bad.stderr
        assert words in bad.stderr
        assert "Traceback" not in bad.stderr


def test_a_changed_definition_is_refused_naming_the_node_unless_forced(
        project: Project) -> None:
    old = _failed_run(project)
    project.workflow("three", FLOW.replace("echo three >>", "echo THREE >>"))
    (project.root / "fixed").touch()
    refused = project.wfrun("rerun", old)
    assert refused.returncode == 2
    assert "changed since run" in refused.stderr
    assert "(changed: three)" in refused.stderr
    assert "--force" in refused.stderr
    assert len(project.runs()) == 1  # nothing was queued
    assert project.json("show", old, "--json")["rerun_by"] == []
    done = project.wfrun("rerun", old, "--force", "--json", "-q")
    assert done.returncode == 0, done.stderr
    shown = project.json("show", json.loads(done.stdout)["run_id"], "--json")
    assert (shown["rerun"]["forced"], shown["rerun"]["changed_nodes"]) == (True, ["three"])
    assert _lines(project, "count.txt") == ["once"]
    assert _lines(project, "three.txt") == ["THREE"]


def test_set_replaces_a_reused_output_checked_against_its_schema(tmp_path: Path) -> None:
    project = Project(tmp_path / "proj")
    project.workflow("review", REVIEW)
    script = project.file("agent.yaml", "review: {verdict: approve}\n")
    done = project.wfrun("run", "review", "--agent", f"scripted:{script}", "--json", "-q")
    assert done.returncode == 1, done.stderr
    old = json.loads(done.stdout)["run_id"]
    (project.root / "fixed").touch()
    bad = project.wfrun("rerun", old, "--set", 'review={"verdict": "maybe"}')
    assert bad.returncode == 2
    assert "--set review: the value does not match the node's output schema" in bad.stderr
    for sets, words in [("decide={}", "not reused"), ("review=nope", "not valid JSON"),
                        ("review", "NODE=JSON")]:
        bad = project.wfrun("rerun", old, "--set", sets)
        assert bad.returncode == 2, bad.stderr
        assert words in bad.stderr
    assert len(project.runs()) == 1
    done = project.wfrun("rerun", old, "--set", 'review={"verdict": "reject"}', "--json",
                         "-q")
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["final_output"]["stdout"] == "reject\n"  # no agent: the set value
    shown = project.json("show", outcome["run_id"], "--json")
    assert shown["rerun"]["set"] == ["review"]
    assert [e["set"] for e in shown["timeline"][:2]] == [False, True]
    assert _lines(project, "count.txt") == ["fetched"]


def test_sigkill_during_a_rerun_recovers_like_any_run(project: Project) -> None:
    old = _failed_run(project)
    (project.root / "go").unlink()
    (project.root / "fixed").touch()
    proc = subprocess.Popen(project.argv("rerun", old, "--json", "-q"), cwd=project.root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        started = project.root / "two.started"
        started.unlink()
        wait_until(started.exists, what="the rerun's step two to start")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    (new,) = [r["run_id"] for r in project.runs() if r["run_id"] != old]
    (project.root / "go").touch()
    done = project.wfrun("resume", new, "--json", "-q")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    assert _lines(project, "count.txt") == ["once"]  # step 1 still ran once in all
    assert _lines(project, "three.txt") == ["three"]
    shown = project.json("show", new, "--json")
    assert shown["rerun_of"] == old
    assert [e["node"] for e in shown["timeline"]] == ["one", "two", "two", "three"]


def test_rerun_and_the_cache_with_bundles_in_postgres(pg_cluster: PgCluster,
                                                      tmp_path: Path) -> None:
    url = pg_cluster.create_schema(f"rerun_{secrets.token_hex(4)}")
    project = Project(tmp_path / "proj")
    project.workflow("three", FLOW.replace("""      one:
        action:""", """      one:
        cache: 1h
        action:"""))
    (project.root / "go").touch()
    env = {"WFRUN_STORE": url}
    done = project.wfrun("run", "three", "--json", "-q", env=env)
    assert done.returncode == 1, done.stderr
    old = json.loads(done.stdout)["run_id"]
    assert not (project.runs_dir / old).exists()  # the bundle is in the database
    (project.root / "fixed").touch()
    done = project.wfrun("rerun", old, "--json", "-q", env=env)
    assert done.returncode == 0, done.stderr
    new = json.loads(done.stdout)["run_id"]
    assert _lines(project, "count.txt") == ["once"]
    assert project.json("show", old, "--json", env=env)["rerun_by"] == [new]
    # A fresh run: step one's result comes from the cache the first run filled.
    done = project.wfrun("run", "three", "--json", "-q", env=env)
    assert done.returncode == 0, done.stderr
    shown = project.json("show", json.loads(done.stdout)["run_id"], "--json", env=env)
    assert shown["timeline"][0]["cached_from"] == old
    assert _lines(project, "count.txt") == ["once"]
