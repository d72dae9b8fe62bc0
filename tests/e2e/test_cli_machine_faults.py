"""Every CLI command on a faulty machine: one line, no traceback, nothing lost (issue 10).

Real faults only (tests/machinefaults.py): a small tmpfs filled to its last page
(full disk), a read-only bind mount (root ignores file modes, so no chmod), store
pages overwritten with garbage and a truncated store file, a write lock held by
another connection. For each, every command either works (the views: `status`,
`why`, `store check` read a read-only or full store; `runs` and `show` never need
the store) or prints exactly one `wfrun: error:` line that says what to do; none
advises `wfrun store reset` (it deletes every queued launch), and the queued
launches are all there, and run, once the fault is gone.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import machinefaults as mf
import pytest
from waiting import LineReader, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
QUEUED = re.compile(r"^Workflow greet queued \(run (greet-\d{8}T\d{6}Z-[0-9a-f]{8})\)\.$")
BUSY = "wfrun: error: the store is busy (locked by another process); try again"


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        flows = root / ".wfrun" / "workflows"
        flows.mkdir(parents=True)
        (flows / "greet.yaml").write_text(textwrap.dedent("""
            start: hello
            nodes:
              hello: {compute: "{{ {'greeting': 'hi'} }}"}
        """))
        # Two steps, the second's output (300 KB) moves to artifacts/: a bundle write
        # that a small disk refuses after the run has begun.
        (flows / "big.yaml").write_text(textwrap.dedent("""
            start: small
            nodes:
              small: {compute: "{{ {'a': 1} }}"}
              big: {compute: "{{ 'x' * 300000 }}"}
            edges:
              - {from: small, to: big}
        """))

    @property
    def store(self) -> Path:
        return self.root / ".wfrun" / "state" / "store.sqlite3"

    @property
    def runs(self) -> Path:
        return self.root / ".wfrun" / "runs"

    def wfrun(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "runner", "--project", str(self.root),
                               *args], capture_output=True, text=True, timeout=60,
                              cwd=self.root, env=dict(os.environ))

    def start(self) -> str:
        done = self.wfrun("start", "greet")
        assert done.returncode == 0, done.stderr
        queued = QUEUED.match(done.stdout.strip())
        assert queued is not None, done.stdout
        return queued[1]

    def completed_run(self) -> str:
        done = self.wfrun("run", "greet", "--json")
        assert done.returncode == 0, done.stderr
        run_id: str = json.loads(done.stdout)["run_id"]
        return run_id

    def rows(self) -> dict[str, tuple[str, int, bool]]:
        """run id -> (status, crash_count, input still stored), read directly."""
        conn = sqlite3.connect(f"file:{self.store}?mode=ro", uri=True)
        try:
            return {r[0]: (r[1], r[2], r[3] is not None) for r in conn.execute(
                "SELECT run_id, status, crash_count, input_json FROM workflow_run_queue")}
        finally:
            conn.close()


def one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exactly one `wfrun: error:` line, exit 1, no traceback, no reset advice."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("wfrun: error: "), line
    assert "store reset" not in line, line
    assert done.returncode == 1, (done.returncode, line)
    for needle in needles:
        assert needle in line, line
    return line


def host_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """`wfrun host --once`: its log names each launch it left waiting, one line each,
    then exactly one error line."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines, done.stderr
    for line in lines[:-1]:
        assert re.match(r"^run \S+ (stays queued|is parked): ", line), line
    return one_line_error(subprocess.CompletedProcess(done.args, done.returncode, done.stdout,
                                                      lines[-1]), *needles)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def host_once(project: Project) -> subprocess.CompletedProcess[str]:
    return project.wfrun("host", "--once", "--no-controllers", "--quiet")


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "proj")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mf.tmpfs(tmp_path / "disk", "4m") as where:
        yield where


# --- full disk ----------------------------------------------------------------------


def test_a_full_disk_under_the_whole_project(disk: Path) -> None:
    """Store and bundles on one 4 MiB tmpfs, filled to its last page."""
    project = Project(disk / "proj")
    done_run = project.completed_run()
    queued = [project.start() for _ in range(3)]
    store_bytes = mf.sha256(project.store)
    filler = mf.fill(disk)

    # The views read the full store (immutably: there is no room for a -shm).
    assert ok(project.wfrun("status")).splitlines() == [f"{r}  queued" for r in queued]
    assert ok(project.wfrun("status", queued[0])) == f"{queued[0]}  queued\n"
    assert "detached launch" in ok(project.wfrun("why", queued[0]))
    assert ok(project.wfrun("store", "check")).startswith("ok wfrun.controller-store.v1")
    assert done_run in ok(project.wfrun("runs"))
    assert "completed" in ok(project.wfrun("show", done_run))
    # Whatever writes says so, and what to do.
    for args in (("cancel", queued[0]), ("start", "greet"), ("run", "greet"),
                 ("host", "--once", "--no-controllers"),
                 ("host", "--once", "--no-controllers", "--processes", "2")):
        one_line_error(project.wfrun(*args), "no space left", "Free some space")

    assert mf.sha256(project.store) == store_bytes  # nothing was written
    filler.unlink()  # space returns
    assert project.rows() == {done_run: ("done", 0, False),
                              **{r: ("queued", 0, True) for r in queued}}
    ok(host_once(project))
    assert {r: s for r, (s, _, _) in project.rows().items()} == {
        done_run: "done", **{r: "done" for r in queued}}


def test_a_full_bundle_disk_leaves_detached_launches_queued(project: Project,
                                                            tmp_path: Path) -> None:
    """The store has room; the runs folder is its own full tmpfs. A host must not
    fail (or poison) the launches it cannot write a bundle for."""
    queued = [project.start() for _ in range(3)]
    with mf.tmpfs(project.runs, "256k"):
        filler = mf.fill(project.runs)
        host_error(host_once(project), "no space left", "stay queued or parked")
        assert project.rows() == {r: ("queued", 0, True) for r in queued}
        # No half-made bundle (the shared snapshots' folder may be there, empty).
        assert [p.name for p in project.runs.iterdir() if p.name != ".snapshots"] == ["filler"]
        assert not any((project.runs / ".snapshots").glob("*"))

        # A foreground run fails in one line and leaves nothing behind but its row.
        line = one_line_error(project.wfrun("run", "greet"), "did not start (nothing ran)",
                              "no space left")
        failed = re.search(r"run (greet-\S+) did not start", line)
        assert failed is not None
        assert project.rows()[failed[1]][0] == "failed"
        assert [p.name for p in project.runs.iterdir() if p.name != ".snapshots"] == ["filler"]

        # `start --wait` queued a detached launch first: that one stays queued.
        waited = project.wfrun("start", "greet", "--wait")
        one_line_error(waited, "stays queued", "wfrun resume")
        kept = QUEUED.match(waited.stdout.strip())  # its "queued" notice
        assert kept is not None, waited.stdout
        queued.append(kept[1])
        assert project.rows()[kept[1]] == ("queued", 0, True)

        filler.unlink()
        ok(host_once(project))
        rows = project.rows()
        assert all(rows[r][0] == "done" for r in queued), rows
        for run_id in queued:
            assert "completed" in ok(project.wfrun("show", run_id))


def test_a_bundle_write_refused_mid_run_parks_it_and_resume_finishes_it(
        project: Project) -> None:
    with mf.tmpfs(project.runs, "128k"):
        line = one_line_error(project.wfrun("run", "big", "-q"), "is parked", "no space left",
                              "wfrun resume")
        found = re.search(r"run (big-\S+) is parked", line)
        assert found is not None
        run_id = found[1]
        assert ok(project.wfrun("status", run_id)) == f"{run_id}  parked\n"

        mf.resize(project.runs, "4m")
        resumed = project.wfrun("resume", run_id, "--json")
        assert json.loads(ok(resumed))["status"] == "completed"
        artifacts = list((project.runs / run_id / "artifacts").iterdir())
        assert artifacts, "the 300 KB output is an artifact"
        for artifact in artifacts:  # whole files only: a short write once kept its name
            assert artifact.name == f"sha256-{mf.sha256(artifact)}.txt"
        assert not [p for p in (project.runs / run_id).rglob(".*.tmp")]


# --- read-only project ----------------------------------------------------------------


def test_a_read_only_project(project: Project) -> None:
    done_run = project.completed_run()
    queued = project.start()
    before = mf.snapshot(project.root)
    with mf.read_only(project.root):
        assert ok(project.wfrun("status")) == f"{queued}  queued\n"
        assert ok(project.wfrun("status", queued)) == f"{queued}  queued\n"
        assert "detached launch" in ok(project.wfrun("why", queued))
        assert ok(project.wfrun("store", "check")).startswith("ok ")
        assert done_run in ok(project.wfrun("runs"))
        assert "completed" in ok(project.wfrun("show", done_run))
        for args in (("cancel", queued), ("start", "greet"), ("run", "greet"),
                     ("host", "--once", "--no-controllers"),
                     ("host", "--once", "--no-controllers", "--processes", "2")):
            one_line_error(project.wfrun(*args), "read-only", "nothing was changed")
        assert mf.snapshot(project.root) == before  # not a byte, not a -shm
    assert project.rows()[queued] == ("queued", 0, True)


def test_a_read_only_runs_folder_leaves_launches_queued(project: Project) -> None:
    queued = project.start()
    project.runs.mkdir(parents=True, exist_ok=True)
    with mf.read_only(project.runs):
        host_error(host_once(project), "read-only", "stay queued or parked")
        assert project.rows()[queued] == ("queued", 0, True)
    ok(host_once(project))
    assert project.rows()[queued][0] == "done"


# --- a damaged store --------------------------------------------------------------------


def _damage(project: Project, how: str) -> None:
    mf.checkpoint(project.store)
    pages = mf.root_pages(project.store)
    if how == "header page":
        mf.overwrite_page(project.store, 1)
    elif how == "queue table":
        mf.overwrite_page(project.store, pages["workflow_run_queue"])
    elif how == "queue index":
        mf.overwrite_page(project.store, pages["workflow_run_queue_claimable"])
    elif how == "run events":
        mf.overwrite_page(project.store, pages["run_events"])
    elif how == "truncated":
        mf.truncate(project.store, project.store.stat().st_size // 2)
    else:
        assert how == "truncated header"
        mf.truncate(project.store, 50)


@pytest.mark.parametrize("how", ["header page", "queue table", "queue index", "run events",
                                 "truncated", "truncated header"])
def test_a_damaged_store(project: Project, how: str) -> None:
    done_run = project.completed_run()
    queued = project.start()
    _damage(project, how)
    damaged = mf.sha256(project.store)

    check = one_line_error(project.wfrun("store", "check"), "is damaged",
                           "keep a copy of the file")
    assert str(project.store) in check
    for args in (("status",), ("status", queued), ("why", queued), ("cancel", queued),
                 ("host", "--once", "--no-controllers"), ("run", "greet"),
                 ("host", "--once", "--no-controllers", "--processes", "2"),
                 ("start", "greet")):
        done = project.wfrun(*args)
        if done.returncode != 0 or done.stderr.strip():
            one_line_error(done, "is damaged")  # the pages it needed were the bad ones
    # Bundles do not live in the store: they stay readable, and `runs` says it
    # listed them from the bundles (it cannot page a damaged store).
    listed = project.wfrun("runs")
    assert done_run in ok(listed)
    # Only damage to the run events leaves the launch rows readable (and paged).
    fell_back = "these runs were read from their bundles" in listed.stderr
    assert fell_back == (how != "run events"), listed.stderr
    assert "completed" in ok(project.wfrun("show", done_run))
    assert mf.sha256(project.store) == damaged  # no repair attempt, no reset


def test_an_orphaned_wal_is_refused_by_store_check_as_by_every_command(
        project: Project) -> None:
    """A `-wal` left without its store file may hold commits: `store check` says so, as
    `status` and `start` do, instead of "no store yet" (issue 35)."""
    project.store.parent.mkdir(parents=True)
    wal = project.store.with_name(project.store.name + "-wal")
    wal.write_bytes(b"leftover commits")
    lines = {args: one_line_error(project.wfrun(*args), "is missing but store.sqlite3-wal",
                                  "nothing was changed")
             for args in (("store", "check"), ("status",), ("start", "greet"))}
    assert len(set(lines.values())) == 1, lines
    assert wal.read_bytes() == b"leftover commits"
    assert not project.store.exists()


# --- a held write lock ----------------------------------------------------------------


def test_every_command_under_a_held_write_lock(project: Project) -> None:
    done_run = project.completed_run()
    queued = project.start()
    conn = sqlite3.connect(project.store, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")  # another process's writer, until the block ends
    try:
        argvs = {"status": ("status",), "why": ("why", queued), "check": ("store", "check"),
                 "runs": ("runs",), "show": ("show", done_run), "cancel": ("cancel", queued),
                 "start": ("start", "greet"), "run": ("run", "greet"),
                 "host": ("host", "--once", "--no-controllers")}
        procs = {verb: subprocess.Popen(
            [sys.executable, "-m", "runner", "--project", str(project.root), *argv],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=project.root)
            for verb, argv in argvs.items()}
        done = {}
        for verb, proc in procs.items():  # each waits out the 5 s busy timeout at once
            out, err = proc.communicate(timeout=90)
            done[verb] = subprocess.CompletedProcess(argvs[verb], proc.returncode, out, err)
    finally:
        conn.execute("ROLLBACK")
        conn.close()
    assert ok(done["status"]) == f"{queued}  queued\n"  # WAL readers are not blocked
    assert "detached launch" in ok(done["why"])
    assert ok(done["check"]).startswith("ok ")
    assert done_run in ok(done["runs"])
    assert "completed" in ok(done["show"])
    assert one_line_error(done["cancel"]) == BUSY
    assert one_line_error(done["host"]) == BUSY
    one_line_error(done["start"], "busy")
    one_line_error(done["run"], "busy")
    assert project.rows()[queued] == ("queued", 0, True)


def test_a_running_host_says_once_when_the_store_refuses_claims_and_when_it_is_back(
        project: Project) -> None:
    queued = project.start()
    conn = sqlite3.connect(project.store, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    host = subprocess.Popen(
        [sys.executable, "-m", "runner", "--project", str(project.root), "host",
         "--no-controllers", "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, cwd=project.root)
    try:
        assert host.stderr is not None
        lines = LineReader(host.stderr)
        refused = lines.wait_for("cannot claim launches").rstrip("\n")
        assert refused == (f"wfrun host: cannot claim launches: the store {project.store} is "
                           "busy (locked by another process); try again")
        conn.execute("ROLLBACK")
        lines.wait_for("the store accepts claims again")
        wait_until(lambda: project.rows()[queued][0] == "done", what="the launch to run")
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()
        host.terminate()
        host.communicate(timeout=30)  # drains and closes its stderr pipe


# --- missing permissions ----------------------------------------------------------------


def test_another_user_gets_one_line(tmp_path: Path) -> None:
    """Run as `nobody` (root ignores modes): the store folder is root's, 0700.

    `nobody` runs this checkout and its venv through a read-only bind mount in a folder
    anyone can walk: the checkout itself may sit under a private folder (`mktemp -d`).
    """
    shared = Path(f"/tmp/wfrun-perm-{os.getpid()}-{tmp_path.name}")
    shared.mkdir(mode=0o755)
    try:
        os.chmod(shared, 0o755)
        project = Project(shared / "proj")
        for folder in (project.root, project.root / ".wfrun", project.root / ".wfrun" /
                       "workflows"):
            os.chmod(folder, 0o755)
        for flow in (project.root / ".wfrun" / "workflows").iterdir():
            os.chmod(flow, 0o644)
        queued = project.start()
        home = shared / "home"
        home.mkdir(mode=0o777)
        os.chmod(home, 0o777)
        with as_another_user(shared / "checkout") as command:
            for args in (("status",), ("start", "greet"), ("cancel", queued)):
                done = subprocess.run(
                    [*command, "--project", str(project.root), *args],
                    capture_output=True, text=True, timeout=60, cwd=shared,
                    env={**os.environ, "WFRUN_HOME": str(home), "HOME": str(home),
                         "PYTHONPATH": str(shared / "checkout")})
                if ("setpriv" in done.stderr and done.returncode != 0
                        and "wfrun" not in done.stderr):
                    pytest.skip(f"setpriv is not permitted here: {done.stderr.strip()}")
                one_line_error(done, "permission denied", "Run wfrun as the user who owns")
        assert project.rows()[queued] == ("queued", 0, True)
    finally:
        subprocess.run(["rm", "-rf", str(shared)], check=False)


@pytest.mark.parametrize("folder", ["runs", "state"])
def test_an_unreadable_runs_or_state_folder_is_one_line_and_the_launch_waits(
        tmp_path: Path, folder: str) -> None:
    """`.wfrun/runs` or `.wfrun/state` made unreadable (mode 000) under its owner,
    `nobody`: every command says so in one line, no traceback, and a host leaves the
    launch `queued` (it was left `starting`, issue 35); restored, it runs."""
    shared = Path(f"/tmp/wfrun-unreadable-{os.getpid()}-{tmp_path.name}")
    shared.mkdir(mode=0o755)
    try:
        os.chmod(shared, 0o755)
        project = Project(shared / "proj")
        home = shared / "home"
        home.mkdir()
        subprocess.run(["chown", "-R", "nobody:nogroup", str(project.root), str(home)],
                       check=True)
        with as_another_user(shared / "checkout") as command:
            def wfrun(*args: str) -> subprocess.CompletedProcess[str]:
                done = subprocess.run(
                    [*command, "--project", str(project.root), *args], capture_output=True,
                    text=True, timeout=60, cwd=shared,
                    env={**os.environ, "WFRUN_HOME": str(home), "HOME": str(home),
                         "PYTHONPATH": str(shared / "checkout")})
                if "setpriv" in done.stderr and done.returncode != 0:
                    pytest.skip(f"setpriv is not permitted here: {done.stderr.strip()}")
                return done

            queued = QUEUED.match(ok(wfrun("start", "greet")).strip())
            assert queued is not None
            run_id = queued[1]
            target = project.root / ".wfrun" / folder
            target.mkdir(exist_ok=True)
            os.chown(target, *_nobody())
            target.chmod(0)
            try:
                if folder == "runs":
                    host_error(wfrun("host", "--once", "--no-controllers", "--quiet"),
                               "permission denied", "stay queued or parked")
                    assert project.rows()[run_id] == ("queued", 0, True)
                    one_line_error(wfrun("run", "greet"), "permission denied")
                    for args in (("show", run_id), ("why", run_id)):
                        done = wfrun(*args)
                        if done.returncode != 0:
                            one_line_error(done, "permission denied")
                else:
                    for args in (("status",), ("store", "check"), ("start", "greet"),
                                 ("run", "greet"), ("cancel", run_id),
                                 ("host", "--once", "--no-controllers")):
                        one_line_error(wfrun(*args), "permission denied")
            finally:
                target.chmod(0o700)
            ok(wfrun("host", "--once", "--no-controllers", "--quiet"))
        assert project.rows()[run_id][0] == "done"
    finally:
        subprocess.run(["rm", "-rf", str(shared)], check=False)


def _nobody() -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


@contextmanager
def as_another_user(at: Path) -> Iterator[list[str]]:
    """`python -m runner` as `nobody`, from this checkout mirrored at `at`."""
    checkout = Path(__file__).resolve().parents[2]
    python = Path(sys.executable)
    with mf.mirror(checkout, at):
        if python.is_relative_to(checkout):
            yield ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                   str(at / python.relative_to(checkout)), "-m", "runner"]
            return
        # A venv outside the checkout gets its own mirror.
        prefix = Path(sys.prefix)
        with mf.mirror(prefix, at.with_name("prefix")) as mirrored:
            yield ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                   str(mirrored / python.relative_to(prefix)), "-m", "runner"]


# --- private folders -----------------------------------------------------------------------


def test_wfrun_home_and_every_folder_it_makes_are_private_under_umask_000(
        tmp_path: Path) -> None:
    home = tmp_path / "home" / "nested"
    flow = tmp_path / "w.yaml"
    flow.write_text('start: a\nnodes:\n  a: {compute: "{{ 1 }}"}\n')
    done = subprocess.run(
        [sys.executable, "-c", "import os, runpy, sys; os.umask(0); sys.argv = ['wfrun', "
         f"'run', {str(flow)!r}]; runpy.run_module('runner', run_name='__main__')"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "WFRUN_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    made = [tmp_path / "home", *sorted((tmp_path / "home").rglob("*"))]
    assert any(p.name == "store.sqlite3" for p in made)
    assert any(p.name == "trace.jsonl" for p in made)
    for path in made:
        mode = path.stat().st_mode & 0o777
        if path.is_dir():
            assert mode == 0o700, (path, oct(mode))
        else:
            assert mode & 0o077 == 0, (path, oct(mode))  # 0600, or 0400 once sealed
