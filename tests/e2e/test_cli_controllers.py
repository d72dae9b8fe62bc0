"""`wfrun controllers` and `wfrun controller ...` end to end, in subprocesses (DESIGN §7).

The project holds the fixture controllers (fixtures/controllers/project/); the
built-in pull-request controller runs against the fake GitHub server.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.github_server import FakeGitHub
from waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "fixtures" / "controllers" / "project"
HEAD = "0123456789abcdef0123456789abcdef01234567"


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        shutil.copytree(FIXTURE / "workflows", root / ".wfrun" / "workflows")
        shutil.copytree(FIXTURE / "controllers", root / ".wfrun" / "controllers")

    def wfrun(self, *args: str, env: dict[str, str] | None = None,
              timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "runner", "--project", str(self.root),
                               *args], capture_output=True, text=True, timeout=timeout,
                              cwd=self.root, env={**os.environ, **(env or {})})

    def json(self, *args: str, env: dict[str, str] | None = None) -> Any:
        done = self.wfrun(*args, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def file(self, name: str, text: str) -> str:
        path = self.root / name
        path.write_text(text)
        return str(path)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "proj")


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub().start()
    fake.add_pull("octo/widgets", 7, HEAD, checks="success")
    yield fake
    fake.stop()


def pr_json(url: str, **over: Any) -> str:
    return json.dumps({"api_base_url": url, "repository": "octo/widgets", "number": 7,
                       "expected_head_sha": HEAD, **over})


def test_controllers_lists_project_and_builtin_controllers_as_json(project: Project) -> None:
    listed = project.json("controllers", "--json")["controllers"]
    by_name = {(c["name"], c["source"]): c for c in listed}
    assert by_name[("pull-request", "builtin")]["valid"] is True
    assert by_name[("pull-request", "builtin")]["shadowed_by"] is None
    assert by_name[("pull-request", "builtin")]["digest"].startswith("sha256:")
    assert by_name[("probe", "project")]["valid"] is True
    assert set(listed[0]) == {"name", "source", "path", "shadowed_by", "valid", "digest",
                              "diagnostics"}


def test_controllers_shows_invalid_definitions_with_their_location(project: Project) -> None:
    (project.root / ".wfrun" / "controllers" / "pull-request.yaml").write_text(
        "reconcile: ./probe.py:reconcile\ntimout: 5s\n")
    done = project.wfrun("controllers")
    assert done.returncode == 0
    assert "bad pull-request" in done.stdout
    assert "(shadowed by project)" in done.stdout  # the built-in one
    assert "pull-request.yaml:2:1" in done.stderr
    assert "did you mean 'timeout'?" in done.stderr
    listed = project.json("controllers", "--json")["controllers"]
    bad = next(c for c in listed if c["name"] == "pull-request" and c["source"] == "project")
    assert bad["valid"] is False
    assert [(d["code"], d["line"], d["column"]) for d in bad["diagnostics"]] == [
        ("unknown-key", 2, 1)]


def test_apply_get_list_reconcile_run_events_delete(project: Project,
                                                    github: FakeGitHub) -> None:
    spec = project.file("pr.json", pr_json(github.url))
    done = project.wfrun("controller", "apply", "pull-request", "pr7", spec)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "applied pull-request/pr7 (generation 1)"

    view = project.json("controller", "get", "pull-request", "pr7", "--json")
    assert view["metadata"]["generation"] == 1
    assert view["metadata"]["resource_version"] == 1
    assert view["metadata"]["key"] == "pr7"
    assert view["spec"]["expected_head_sha"] == HEAD
    assert view["status"]["observed_generation"] == 0
    assert view["status"]["controller_status"] == {"phase": "observing"}
    assert view["effects"] == []
    assert view["workflows"] == []

    # same spec again (as YAML): no new generation; an approval: generation 2
    same = project.file("pr.yaml", f"api_base_url: {github.url}\nrepository: octo/widgets\n"
                                   f"number: 7\nexpected_head_sha: '{HEAD}'\n")
    assert project.json("controller", "apply", "pull-request", "pr7", same,
                        "--json")["generation"] == 1
    approved = project.file("approved.yaml", f"api_base_url: {github.url}\n"
                                             "repository: octo/widgets\nnumber: 7\n"
                                             f"expected_head_sha: '{HEAD}'\n"
                                             "merge_approved: true\n")
    out = project.json("controller", "apply", "pull-request", "pr7", approved, "--json")
    assert out["generation"] == 2
    assert out["key"] == "pr7"

    rows = project.json("controller", "list", "pull-request", "--json")["resources"]
    assert rows == [{"key": "pr7", "generation": 2, "resource_version": out["resource_version"],
                     "phase": "observing", "ready": "Unknown"}]

    done = project.wfrun("controller", "reconcile", "pull-request", "pr7")
    assert done.stdout.strip() == "queued pull-request/pr7 for reconciliation"
    done = project.wfrun("controller", "run", "--once")
    assert done.returncode == 0, done.stderr
    assert "processed 1 reconcile pass" in done.stderr
    assert len(github.merges()) == 1

    view = project.json("controller", "get", "pull-request", "pr7", "--json")
    ready = next(c for c in view["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["observed_generation"]) == (
        "True", "Merged", 2)
    assert view["effects"][0]["key"] == f"merge:2:{HEAD}"
    assert view["effects"][0]["state"] == "applied"
    text = project.wfrun("controller", "get", "pull-request", "pr7").stdout
    assert "Ready=True Merged" in text
    assert f"effect merge:2:{HEAD} github-merge applied" in text

    events = project.json("controller", "events", "pull-request", "pr7", "--json")["events"]
    types = [e["type"] for e in events]
    assert types[:2] == ["resource_applied", "resource_applied"]
    assert {"reconcile_started", "effect_pending", "effect_applied",
            "reconcile_finished"} <= set(types)
    assert len({e["reconcile_id"] for e in events if e["type"] == "reconcile_started"}) == 1

    done = project.wfrun("controller", "delete", "pull-request", "pr7")
    assert done.stdout.strip() == "deletion of pull-request/pr7 requested"
    assert project.json("controller", "get", "pull-request", "pr7", "--json")[
        "metadata"]["deletion_timestamp"] is not None
    project.wfrun("controller", "run", "--once")
    gone = project.wfrun("controller", "get", "pull-request", "pr7")
    assert gone.returncode == 3
    assert gone.stderr.strip() == "wfrun: error: no pull-request resource 'pr7'"
    assert len(github.merges()) == 1  # deleting did not act again


def test_run_once_waits_for_the_child_runs_it_started(project: Project) -> None:
    """`run --once` does not exit under a child run: the child finishes, its parent
    gets the follow-up pass, and one invocation reaches Ready."""
    spec = project.file("probe.json", json.dumps({"child": "slow-child"}))
    assert project.wfrun("controller", "apply", "probe", "p1", spec).returncode == 0
    done = project.wfrun("controller", "run", "--once")
    assert done.returncode == 0, done.stderr
    passes = re.search(r"processed (\d+) reconcile passes", done.stderr)
    assert passes is not None, done.stderr
    assert int(passes[1]) >= 2  # asked for the child; saw it succeed
    view = project.json("controller", "get", "probe", "p1", "--json")
    ready = next(c for c in view["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Done")
    assert [(w["request_key"], w["workflow"], w["state"], w["attempt"])
            for w in view["workflows"]] == [("child:1", "slow-child", "succeeded", 1)]
    runs = sorted(p.name for p in (project.root / ".wfrun" / "runs").iterdir()
                  if not p.name.startswith("."))  # .snapshots: the shared snapshots
    assert runs == [view["workflows"][0]["run_id"]]


def test_a_spec_that_fails_the_schema_is_one_line_exit_2(project: Project) -> None:
    bad = project.file("bad.json", json.dumps({"api_base_url": "ftp://x", "repository": "o/r",
                                               "number": 7, "expected_head_sha": HEAD}))
    done = project.wfrun("controller", "apply", "pull-request", "pr7", bad)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("wfrun: error: spec does not match controller 'pull-request'")
    assert "Traceback" not in done.stderr
    assert project.json("controller", "list", "pull-request", "--json")["resources"] == []

    broken = project.file("broken.yaml", "repository: [unclosed\n")
    done = project.wfrun("controller", "apply", "pull-request", "pr7", broken)
    assert done.returncode == 2
    assert "broken.yaml:2:1" in done.stderr
    missing = project.wfrun("controller", "apply", "pull-request", "pr7", "nope.json")
    assert missing.returncode == 2
    assert "cannot read spec file 'nope.json'" in missing.stderr


def test_unknown_controller_is_exit_3_and_bad_usage_exit_2(project: Project) -> None:
    done = project.wfrun("controller", "list", "no-such-thing")
    assert done.returncode == 3
    assert done.stderr.strip() == ("wfrun: error: no controller named 'no-such-thing'; "
                                   "`wfrun controllers` lists them")
    usage = {
        ("controller",): "wfrun: error: missing command; usage: wfrun controller run [--once]"
                         " | list NAME | get NAME KEY | apply NAME KEY FILE",
        ("controller", "probe", "explode"): "wfrun: error: neither 'probe' nor 'explode' is "
                                            "a verb; usage: wfrun controller run [--once]",
        ("controller", "run", "extra"): "wfrun: error: got unexpected extra argument (extra);"
                                        " usage: wfrun controller run [OPTIONS]",
        ("controller", "get", "probe"): "wfrun: error: missing argument 'KEY'; usage: wfrun "
                                        "controller get [OPTIONS] NAME KEY (see `wfrun "
                                        "controller get --help`)",
        ("controller", "list", "probe", "--bogus"): "wfrun: error: no such option '--bogus'",
    }
    for argv, start in usage.items():
        done = project.wfrun(*argv)
        assert done.returncode == 2, argv
        assert done.stdout == ""
        assert len(done.stderr.splitlines()) == 1, done.stderr  # one line, never click's box
        assert done.stderr.startswith(start), done.stderr
    for argv in (["controller", "probe", "get", "nobody"], ["controller", "get", "probe",
                                                              "nobody"]):
        missing = project.wfrun(*argv)
        assert missing.returncode == 3
        assert missing.stderr == "wfrun: error: no probe resource 'nobody'\n"


def test_every_verb_has_its_own_help(project: Project) -> None:
    # Help texts, in this process (click's CliRunner): ten interpreter start-ups
    # would check nothing more (the usage errors above are checked as processes).
    from click.testing import CliRunner

    from runner.cli.app import cli

    def help_of(*args: str) -> str:
        done = CliRunner().invoke(cli, ["--project", str(project.root), *args],
                                  prog_name="wfrun")
        assert done.exit_code == 0, (args, done.stderr, done.exc_info)
        return done.stdout

    expected = {"list": ("NAME", "--json"), "get": ("NAME KEY", "--json"),
                "apply": ("NAME KEY FILE", "--json"), "reconcile": ("NAME KEY", "--json"),
                "delete": ("NAME KEY", "--json"), "events": ("NAME KEY", "--json"),
                "cancel": ("NAME KEY", "--json"), "run": ("", "--once")}
    group = help_of("controller", "--help")
    for verb, (args, option) in expected.items():
        assert f"wfrun controller {verb}" in group
        text = help_of("controller", verb, "--help")
        usage = f"Usage: wfrun controller {verb} [OPTIONS] {args}".rstrip()
        assert text.splitlines()[0] == usage
        assert option in text
    assert "--agent SPEC" in help_of("controller", "run", "-h")


def test_new_and_old_argument_orders_do_the_same(project: Project) -> None:
    spec = project.file("probe.json", json.dumps({}))
    assert project.json("controller", "apply", "probe", "p1", spec, "--json") == {
        "key": "p1", "generation": 1, "resource_version": 1}
    new = project.json("controller", "list", "probe", "--json")
    old = project.json("controller", "probe", "list", "--json")
    assert new == old
    assert [r["key"] for r in new["resources"]] == ["p1"]
    assert project.json("controller", "get", "probe", "p1", "--json") == project.json(
        "controller", "probe", "get", "p1", "--json")
    assert project.json("controller", "reconcile", "probe", "p1", "--json") == {
        "controller": "probe", "key": "p1", "queued": True}
    done = project.wfrun("controller", "probe", "reconcile", "p1")
    assert done.stdout == "queued probe/p1 for reconciliation\n"
    events = project.json("controller", "events", "probe", "p1", "--json")["events"]
    assert [e["type"] for e in events] == ["resource_applied"]
    deleted = project.json("controller", "delete", "probe", "p1", "--json")
    assert deleted["key"] == "p1"
    assert deleted["deletion_timestamp"] is not None


#: A child that runs until released: it records its start and its shell's pid, waits
#: for release.KEY, then records its end. KEY is the probe's child input (its key).
HELD_CHILD = """\
name: held-child
input: {type: object}
start: hold
nodes:
  hold:
    action:
      shell: [sh, -c, 'echo $$ > "pid.$KEY"; echo "$KEY" >> starts.log;
              while [ ! -e "release.$KEY" ]; do sleep 0.1; done; echo "$KEY" >> finished.log']
      env: {KEY: "{{ input.key }}"}
"""


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _child(project: Project, key: str) -> dict[str, Any]:
    (request,) = project.json("controller", "get", "probe", key, "--json")["workflows"]
    return dict(request)


def _ready_reason(project: Project, key: str) -> str | None:
    view = project.json("controller", "get", "probe", key, "--json")
    return next((c["reason"] for c in view["status"]["conditions"] if c["type"] == "Ready"),
                None)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_cancel_stops_only_the_resources_running_children(project: Project,
                                                          tmp_path: Path) -> None:
    """`wfrun controller cancel NAME KEY` asks the live manager to stop KEY's running
    child (it ends cancelled, its request failed, the resource is woken and settles
    ChildFailed); another resource's child, a queued detached launch and the queue
    are left alone. Once the manager stopped (its children parked), cancel ends a
    parked child itself, and no later manager resumes it."""
    root = project.root
    (root / ".wfrun" / "workflows" / "held-child.yaml").write_text(HELD_CHILD)
    spec = project.file("held.json", json.dumps({"child": "held-child"}))
    for key in ("p1", "p2"):
        assert project.wfrun("controller", "apply", "probe", key, spec).returncode == 0
    detached = project.json("start", "quick-child", "--input", '{"key": "x"}',
                            "--json")["run_id"]
    err = tmp_path / "serve.err"
    with err.open("w") as f:
        serve = subprocess.Popen([sys.executable, "-m", "runner", "--project", str(root),
                                  "controller", "run"], stdout=subprocess.DEVNULL, stderr=f,
                                 cwd=root, text=True)
    try:
        wait_until(lambda: sorted(_lines(root / "starts.log")) == ["p1", "p2"],
                   what=lambda: f"both children to start; manager: {err.read_text()}")
        shells = {key: int((root / f"pid.{key}").read_text()) for key in ("p1", "p2")}

        done = project.json("controller", "cancel", "probe", "p1", "--json")
        assert (done["controller"], done["key"]) == ("probe", "p1")
        (child,) = done["children"]
        assert (child["request_key"], child["workflow"], child["outcome"]) == (
            "child:1", "held-child", "cancel_requested")
        run_id = child["run_id"]
        assert run_id == _child(project, "p1")["run_id"]

        # The manager's runner cancels it; the request fails and wakes p1's next pass.
        wait_until(lambda: _ready_reason(project, "p1") == "ChildFailed",
                   what="p1 to settle ChildFailed")
        assert _child(project, "p1")["state"] == "failed"
        assert not _alive(shells["p1"])  # its node was stopped, not left running
        status = project.json("status", run_id, "--json")
        assert status["launch"]["status"] == "cancelled"
        assert _lines(root / "finished.log") == []

        # Nothing else moved: p2's child still runs, the detached launch is queued.
        assert _child(project, "p2")["state"] == "running"
        assert _alive(shells["p2"])
        assert project.json("status", detached, "--json")["launch"]["status"] == "queued"
        again = project.wfrun("controller", "cancel", "probe", "p1")
        assert again.returncode == 0, again.stderr
        assert again.stdout == "probe/p1 has no running child workflows\n"

        serve.send_signal(signal.SIGTERM)
        assert serve.wait(30) == 0, err.read_text()
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait(10)

    # The stop parked p2's child (a later manager would resume it); cancel it now.
    assert _child(project, "p2")["state"] == "running"
    text = project.wfrun("controller", "cancel", "probe", "p2")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("cancelled        child:1 held-child run ")
    assert _child(project, "p2")["state"] == "failed"
    once = project.wfrun("controller", "run", "--once")
    assert once.returncode == 0, once.stderr
    assert _ready_reason(project, "p2") == "ChildFailed"
    assert sorted(_lines(root / "starts.log")) == ["p1", "p2"]  # never resumed
    assert _lines(root / "finished.log") == []
    assert project.json("status", detached, "--json")["launch"]["status"] == "queued"

    missing = project.wfrun("controller", "cancel", "probe", "nobody")
    assert missing.returncode == 3
    assert missing.stderr == "wfrun: error: no probe resource 'nobody'\n"


def test_one_bad_controller_file_does_not_stop_the_host(project: Project) -> None:
    # Issue 35 item 7: a hook file that fails to import, and a 400-digit timeout (which
    # crashed the compiler), next to a good controller: the host runs the good one and
    # names each bad one on stderr.
    controllers = project.root / ".wfrun" / "controllers"
    (controllers / "broken.py").write_text("raise RuntimeError('boom at import')\n")
    (controllers / "broken.yaml").write_text("reconcile: ./broken.py:reconcile\n")
    (controllers / "quits.py").write_text("import sys\nsys.exit(3)\n")  # ended the host
    (controllers / "quits.yaml").write_text("reconcile: ./quits.py:reconcile\n")
    (controllers / "endless.yaml").write_text(
        f"reconcile: ./probe.py:reconcile\ntimeout: {'9' * 400}s\n")
    (controllers / "setty.yaml").write_text(
        "reconcile: ./probe.py:reconcile\ninitial_status: !!set {a, b}\n")
    spec = project.file("probe.json", json.dumps({"passes": 1}))
    assert project.wfrun("controller", "apply", "probe", "p1", spec).returncode == 0
    listed = {c["name"]: c for c in project.json("controllers", "--json")["controllers"]}
    assert listed["endless"]["valid"] is False
    assert listed["setty"]["valid"] is True
    for argv in (("host", "--once"), ("controller", "run", "--once")):
        done = project.wfrun(*argv, timeout=120)
        assert done.returncode == 0, (argv, done.stderr)
        assert "Traceback" not in done.stderr
        assert re.search(r"controller 'broken' is not loaded: .*boom at import", done.stderr), \
            done.stderr
        assert "controller 'endless' is not loaded: " in done.stderr
        assert re.search(r"controller 'quits' is not loaded: .*SystemExit: 3", done.stderr), \
            done.stderr
    view = project.json("controller", "get", "probe", "p1", "--json")
    assert view["status"]["observed_generation"] == 1, view["status"]
