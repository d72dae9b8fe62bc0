"""scripts/sweep-test-tmp: what a SIGKILLed test run left on the RAM disk is removed,
its Postgres servers stopped, and nothing else is touched (a live run's folder, a folder
without the pid file, a process whose pid a stale postmaster.pid names by chance)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from waiting import DEADLINE

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sweep-test-tmp"


#: A server's stand-in: SIGQUIT ends it with 42, as a postmaster sets its own handler
#: (a suite started in the background by a non-interactive shell inherits SIGQUIT
#: ignored, as bash sets it for `&` jobs: the stand-in then outlived the signal).
STAND_IN = ("import signal, sys, time\n"
            "signal.signal(signal.SIGQUIT, lambda *_: sys.exit(42))\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)")


def _sleeper(*argv: str) -> subprocess.Popen[bytes]:
    """A process that stands in for a server: it sleeps, with `argv` on its command line.
    Returned once it says its SIGQUIT handler is set (it has exec'd, so its command line
    shows `argv`: before, it is a copy of this process, which the sweep rightly leaves
    alone; and a SIGQUIT before the handler would end it with the default action)."""
    proc = subprocess.Popen([sys.executable, "-c", STAND_IN, *argv], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n", f"stand-in {proc.pid} did not start"
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    assert cmdline.split(b"\0")[-2:-1] == [argv[-1].encode()]
    return proc


def test_a_killed_runs_folder_is_removed_and_its_servers_stopped(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = tmp_path / "wfrun-dead01"
    (dead / "t" / "pg" / "data").mkdir(parents=True)
    (dead / "other").mkdir()
    (dead / ".wfrun-test-pid").write_text(f"{gone.pid}\n")
    server = _sleeper("-D", str(dead / "t" / "pg" / "data"))
    decoy = _sleeper("unrelated")  # a reused pid: its command line names no folder of ours
    live = tmp_path / "wfrun-live01"
    live.mkdir()
    (live / ".wfrun-test-pid").write_text(f"{os.getpid()}\n")
    old = tmp_path / "wfrun-old001"  # from before the pid file: not ours to judge
    old.mkdir()
    try:
        (dead / "t" / "pg" / "data" / "postmaster.pid").write_text(
            f"{server.pid}\n{dead}/t/pg/data\n")
        (dead / "other" / "postmaster.pid").write_text(f"{decoy.pid}\n")
        done = subprocess.run(["bash", str(SCRIPT), str(tmp_path)], capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert not dead.exists()
        assert live.is_dir()
        assert old.is_dir()
        assert server.wait(timeout=DEADLINE) == 42
        assert decoy.poll() is None
        assert done.stdout.strip() == (f"sweep: removed {dead}, left by a test run that was "
                                       "killed (1 Postgres server(s) stopped)")
    finally:
        for p in (server, decoy):
            if p.poll() is None:
                p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()


def test_nothing_to_sweep_says_nothing(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
