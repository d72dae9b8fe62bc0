"""YAML the C loader accepts but the rest used not to (issue 10 item 3), through the
real CLI: each bad file gets its positioned diagnostic, never a traceback, and never
hides the results of the other files (`list`, `validate`, `host` with a bad controller)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from everyday import Project
from waiting import wait_for_line

from runner.compiler._sources import MAX_DEFINITION_BYTES

BAD = {
    "tag_float": ('start: a\nnodes:\n  a: {compute: !!float ""}\n', "yaml-value", 3, 16),
    "tag_int": ('start: a\nnodes:\n  a: {compute: !!int "0x"}\n', "yaml-value", 3, 16),
    "tag_bool": ('start: a\nnodes:\n  a: {compute: !!bool "maybe"}\n', "yaml-value", 3, 16),
    "tag_date": ('start: a\nnodes:\n  a: {compute: !!timestamp "2020-13-45"}\n', "yaml-value",
                 3, 16),
    "tag_set": ("start: a\nnodes: !!set {a, b}\n", "wrong-type", 2, 8),
    "seq_key": ('start: a\nnodes:\n  ? [{a: 1}]\n  : {compute: "1"}\n', "yaml-value", 0, 0),
    "long_int": ("start: a\nmax_steps: " + "9" * 5000 + '\nnodes:\n  a: {compute: "1"}\n',
                 "yaml-value", 2, 12),
    "long_include": ("start: x\nincludes:\n  x: ./" + "a" * 5000 + '.yaml\nnodes:\n'
                     '  a: {compute: "1"}\n', "workflow-not-found", 3, 6),
    # The compiler crashers of issue 35 item 7: tracebacks in list, validate and the UI.
    "duration_digits": ("start: a\nnodes:\n  a: {compute: '1', timeout: " + "9" * 400 + "s}\n",
                        "invalid-duration", 3, 30),
    "duration_int": ("start: a\nnodes:\n  a: {compute: '1', timeout: " + "9" * 400 + "}\n",
                     "invalid-duration", 3, 30),
    "backoff_digits": ("start: a\nnodes:\n  a: {compute: '1', retry: {attempts: 2, backoff: "
                       + "9" * 400 + "h}}\n", "invalid-duration", 3, 51),
    "hook_nul": ('start: a\nnodes:\n  a: {compute: {call: "./ho\\0oks.py:f"}}\n',
                 "invalid-hook", 3, 23),
    "set_compute": ("start: a\nnodes:\n  a: {compute: !!set {a, b}}\n", "compute-form", 3, 16),
}
GOOD = 'start: a\nnodes:\n  a: {compute: "{{ 1 + 1 }}"}\n'


@pytest.fixture
def project(tmp_path: Path) -> Project:
    proj = Project(tmp_path)
    for name, (text, *_rest) in BAD.items():
        proj.workflow(name, text)
    proj.workflow("good", GOOD)
    return proj


def test_validate_reports_every_bad_file_and_the_good_one(project: Project) -> None:
    done = project.wfrun("validate", "--format", "json")
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    report = json.loads(done.stdout)
    files = {f["name"]: f for f in report["files"]}
    assert files["good"]["valid"] is True
    for name, (_text, code, line, column) in BAD.items():
        diags = files[name]["diagnostics"]
        assert (code, line, column) in [(d["code"], d["line"], d["column"]) for d in diags], \
            (name, diags)
        for d in diags:
            assert "\n" not in d["message"]


def test_list_shows_every_file(project: Project) -> None:
    listed = project.wfrun("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr
    rows = json.loads(listed.stdout)
    rows = rows.get("workflows", rows) if isinstance(rows, dict) else rows
    valid = {r["name"]: r["valid"] for r in rows}
    assert valid["good"] is True
    assert all(valid[name] is False for name in BAD)


def test_host_starts_with_a_bad_controller_file(project: Project) -> None:
    folder = project.root / ".wfrun" / "controllers"
    folder.mkdir()
    (folder / "broken.yaml").write_text('kind: x\nspec: !!int "0x"\n')
    proc = subprocess.Popen(project.argv("host"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=project.root)
    try:
        assert proc.stdout is not None
        wait_for_line(proc.stdout, r"wfrun host running for")
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert "Traceback" not in rest


def test_a_file_with_a_hundred_thousand_errors_is_capped(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    lines = ["start: n0", "nodes:"] + [f"  n{i}: {{agent: x, bogus: 1}}" for i in range(20_000)]
    proj.workflow("huge", "\n".join(lines) + "\n")
    done = proj.wfrun("validate", "huge", "--format", "json", timeout=120)
    assert done.returncode == 1
    diags = json.loads(done.stdout)["files"][0]["diagnostics"]
    assert len(diags) == 201
    assert diags[0]["code"] == "too-many-errors"
    assert all(d["line"] > 0 for d in diags[1:])  # still placed on their lines


def _mistakes(limit: int) -> str:
    """As many `{agent: x, bogus: 1}` nodes (two mistakes each) as fit in `limit` bytes."""
    lines, size = ["start: n0", "nodes:"], 20
    i = 0
    while True:
        line = f"  n{i}: {{agent: x, bogus: 1}}"
        if size + len(line) + 1 > limit:
            return "\n".join(lines) + "\n"
        lines.append(line)
        size += len(line) + 1
        i += 1


@pytest.mark.timeout(120)  # generous: the point is minutes (26 s, 477 MB) became instant
def test_a_file_over_the_size_cap_is_one_positioned_diagnostic(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    text = _mistakes(4 * 1024 * 1024)  # the fuzz case: 4 MiB, ~134,000 mistakes
    proj.workflow("huge", text)
    proj.workflow("good", GOOD)
    done = proj.wfrun("validate", "--format", "json", timeout=110)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    files = {f["name"]: f for f in json.loads(done.stdout)["files"]}
    assert files["good"]["valid"] is True
    [diag] = files["huge"]["diagnostics"]
    assert diag["code"] == "file-too-large"
    assert f"{MAX_DEFINITION_BYTES:,} bytes" in diag["message"]
    # Placed at the first byte past the cap, counted from the text (nothing parsed).
    head = text.encode()[:MAX_DEFINITION_BYTES]
    assert (diag["line"], diag["column"]) == (
        head.count(b"\n") + 1, len(head) - head.rfind(b"\n"))


@pytest.mark.timeout(120)
def test_a_file_at_the_cap_with_every_node_wrong_stops_at_the_error_cap(
        tmp_path: Path) -> None:
    proj = Project(tmp_path)
    text = _mistakes(MAX_DEFINITION_BYTES)
    assert len(text.encode()) <= MAX_DEFINITION_BYTES
    proj.workflow("full", text)
    done = proj.wfrun("validate", "full", "--format", "json", timeout=110)
    assert done.returncode == 1, done.stderr
    diags = json.loads(done.stdout)["files"][0]["diagnostics"]
    assert len(diags) == 201
    assert diags[0]["code"] == "too-many-errors"
    assert {d["code"] for d in diags[1:]} <= {"unknown-key", "missing-key"}
    assert all(d["line"] > 0 for d in diags[1:])
