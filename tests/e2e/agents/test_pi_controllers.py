"""Real Pi: the extension runs the project's controllers from session start to shutdown;
`/controller` lists resources and requests reconciliation from inside Pi."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pi_rpc import REPO, VENV_BIN
from pi_world import World
from waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
PROBE = REPO / "fixtures" / "controllers" / "project" / "controllers"


def _passes(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_controller_command_lists_and_reconciles_inside_pi(world: World) -> None:
    shutil.copytree(PROBE, world.project / ".wfrun" / "controllers")
    log = world.root / "passes.jsonl"
    spec = world.root / "spec.json"
    spec.write_text(json.dumps({"log": str(log)}))
    subprocess.run([str(VENV_BIN / "wfrun"), "controller", "apply", "probe", "k1", str(spec)],
                   cwd=world.project, check=True, capture_output=True)
    assert _passes(log) == []  # nothing reconciles until a manager runs

    pi = world.pi()
    (first,) = wait_until(lambda: _passes(log), what="the manager Pi started to reconcile k1")
    manager_pid = int(first["pid"])

    at = pi.mark()
    pi.send({"type": "prompt", "message": "/controller list probe"})
    listed = pi.wait_record(lambda r: r.get("method") == "notify" and "k1" in str(r.get("message")),
                            "the /controller list notification", at)
    assert listed["notifyType"] == "info"

    at = pi.mark()
    pi.send({"type": "prompt", "message": "/controller reconcile probe k1"})
    pi.wait_record(lambda r: r.get("method") == "notify" and r.get("notifyType") == "info",
                   "the /controller reconcile notification", at)
    wait_until(lambda: len(_passes(log)) >= 2, what="the requested second pass")
    assert _passes(log)[1]["pid"] == manager_pid  # the manager Pi started ran it

    at = pi.mark()
    pi.send({"type": "prompt", "message": "/controller frobnicate"})
    bad = pi.wait_record(lambda r: r.get("method") == "notify" and
                         r.get("notifyType") == "error", "the usage error", at)
    assert bad["message"] == ("wfrun: /controller frobnicate: use one of list, get, reconcile, "
                              "cancel, events (or nothing to list controllers)")

    assert pi.close() == 0  # session_shutdown stops the manager
    wait_until(lambda: not _alive(manager_pid), what="the controller manager to stop")


def test_pi_killed_alone_leaves_no_controller_manager_behind(world: World) -> None:
    shutil.copytree(PROBE, world.project / ".wfrun" / "controllers")
    log = world.root / "passes.jsonl"
    spec = world.root / "spec.json"
    spec.write_text(json.dumps({"log": str(log)}))
    subprocess.run([str(VENV_BIN / "wfrun"), "controller", "apply", "probe", "k1", str(spec)],
                   cwd=world.project, check=True, capture_output=True)
    pi = world.pi()
    (first,) = wait_until(lambda: _passes(log), what="the manager Pi started to reconcile k1")
    manager_pid = int(first["pid"])
    os.kill(pi.proc.pid, signal.SIGKILL)  # only Pi: no shutdown handler runs
    pi.proc.wait(30)
    wait_until(lambda: not _alive(manager_pid), what="the orphaned manager to stop")
