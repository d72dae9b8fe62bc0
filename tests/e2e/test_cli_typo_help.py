"""Issue 34 item 14: a typo gets a did-you-mean (commands, controller names and
verbs), `validate --json` is `--format json`, and `retry: 3` says the mapping it means."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "fixtures" / "controllers" / "project"


def wfrun(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", "--project", str(root), *args],
                          capture_output=True, text=True, timeout=60, cwd=root,
                          env=dict(os.environ))


def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(FIXTURE / "workflows", root / ".wfrun" / "workflows")
    shutil.copytree(FIXTURE / "controllers", root / ".wfrun" / "controllers")
    return root


def test_a_misspelled_command_gets_a_did_you_mean(tmp_path: Path) -> None:
    root = project(tmp_path)
    typo = wfrun(root, "rnu", "quick-child")
    assert typo.returncode == 2
    assert typo.stderr.strip().splitlines()[-1] == "Error: No such command 'rnu'. Did you " \
        "mean 'run'?"
    far = wfrun(root, "xyzzy")
    assert far.returncode == 2
    assert far.stderr.strip().splitlines()[-1] == "Error: No such command 'xyzzy'."


def test_a_misspelled_controller_name_or_verb_gets_a_did_you_mean(tmp_path: Path) -> None:
    root = project(tmp_path)
    for argv in (["controller", "list", "prboe"], ["controller", "get", "prboe", "k"],
                 ["controller", "events", "prboe", "k"]):
        done = wfrun(root, *argv)
        assert done.returncode == 3, done.stderr
        assert done.stderr == ("wfrun: error: no controller named 'prboe'; did you mean "
                               "'probe'? `wfrun controllers` lists them\n")
    verb = wfrun(root, "controller", "lsit")
    assert verb.returncode == 2
    assert verb.stderr.startswith("wfrun: error: unknown verb 'lsit'; did you mean 'list'? "
                                  "usage: wfrun controller ")


def test_validate_takes_json_like_every_other_command(tmp_path: Path) -> None:
    root = project(tmp_path)
    as_json = wfrun(root, "validate", "quick-child", "--json")
    assert as_json.returncode == 0, as_json.stderr
    as_format = wfrun(root, "validate", "quick-child", "--format", "json")
    assert json.loads(as_json.stdout) == json.loads(as_format.stdout)
    assert json.loads(as_json.stdout)["valid"] is True
    both = wfrun(root, "validate", "--json", "--format", "text")
    assert both.returncode == 2
    assert both.stderr == "wfrun: error: --json and --format text disagree: give one of them\n"


def test_retry_given_as_a_number_is_told_the_mapping_it_means(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / ".wfrun" / "workflows" / "flaky.yaml").write_text(
        "start: a\nnodes:\n  a: {action: {shell: [echo, hi]}, retry: 3}\n")
    done = wfrun(root, "validate", "flaky", "--json")
    assert done.returncode == 1
    (diag,) = json.loads(done.stdout)["files"][0]["diagnostics"]
    assert (diag["code"], diag["message"], diag["hint"]) == (
        "wrong-type", "retry must be a mapping, not an integer", "write `retry: {attempts: 3}`")
