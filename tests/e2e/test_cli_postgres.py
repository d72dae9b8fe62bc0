"""`--store postgresql://...`, WFRUN_STORE and `.wfrun/config.yaml` end to end: the CLI
in subprocesses against a throwaway cluster; SQLite stays the default; a password
in the URL is never printed."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest
from pgcluster import PgCluster

from runner.clock import FileClock

PASSWORD = "pw-NEVER-PRINTED-42"


@pytest.fixture
def url(pg_cluster: PgCluster) -> str:
    plain = pg_cluster.create_schema(f"cli_{secrets.token_hex(4)}")
    return plain.replace("postgres@", f"postgres:{PASSWORD}@")  # trust auth ignores it


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".wfrun" / "workflows").mkdir(parents=True)
    (tmp_path / ".wfrun" / "workflows" / "greet.yaml").write_text(textwrap.dedent("""
        start: hello
        nodes:
          hello: {compute: "{{ {'greeting': 'hi ' ~ input.name} }}"}
    """))
    return tmp_path


def wfrun(project: Path, *args: str, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "WFRUN_STORE"}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "runner", "--project", str(project), *args],
                          capture_output=True, text=True, timeout=120, cwd=project, env=environ)


def _launches(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(url.replace(f":{PASSWORD}", "")) as conn:
        rows = conn.execute("SELECT workflow_ref, status FROM workflow_run_queue").fetchall()
    return [(str(a), str(b)) for a, b in rows]


def test_store_flag_runs_on_postgres_and_never_prints_the_password(
    project: Path, url: str
) -> None:
    done = wfrun(project, "--store", url, "run", "greet", "-i", "name=ada")
    assert done.returncode == 0, done.stderr
    assert _launches(url) == [("greet", "done")]
    assert not (project / ".wfrun" / "state" / "store.sqlite3").exists()  # no SQLite file
    check = wfrun(project, "--store", url, "store", "check", "--json")
    assert check.returncode == 0, check.stderr
    info = json.loads(check.stdout)
    assert info["launches"]["done"] == 1
    assert "***" in info["path"]
    for output in (done.stdout, done.stderr, check.stdout, check.stderr):
        assert PASSWORD not in output


def test_wfrun_store_and_the_project_file_select_postgres(project: Path, url: str) -> None:
    done = wfrun(project, "run", "greet", "-i", "name=env", env={"WFRUN_STORE": url})
    assert done.returncode == 0, done.stderr
    (project / ".wfrun" / "config.yaml").write_text(f"store: {url}\n")
    done = wfrun(project, "run", "greet", "-i", "name=file")
    assert done.returncode == 0, done.stderr
    assert _launches(url) == [("greet", "done"), ("greet", "done")]
    # The flag wins over the file: `sqlite` is the embedded default, said explicitly.
    done = wfrun(project, "--store", "sqlite", "run", "greet", "-i", "name=local")
    assert done.returncode == 0, done.stderr
    assert (project / ".wfrun" / "state" / "store.sqlite3").is_file()
    assert len(_launches(url)) == 2


def test_sqlite_is_the_default(project: Path) -> None:
    done = wfrun(project, "run", "greet", "-i", "name=ada")
    assert done.returncode == 0, done.stderr
    assert (project / ".wfrun" / "state" / "store.sqlite3").is_file()


@pytest.mark.parametrize(
    ("args", "env", "config", "phrase"),
    [
        (("--store", f"mysql://u:{PASSWORD}@h/db"), {}, None, "--store: mysql://u:***@h/db"),
        ((), {"WFRUN_STORE": "redis://h"}, None, "WFRUN_STORE: redis://h is not a store"),
        ((), {}, "store: [1, 2]\n", ".wfrun/config.yaml store: the store must be"),
        ((), {}, "store: postgresql://x\n  bad: [\n", ".wfrun/config.yaml is not valid YAML"),
        ((), {}, "- a list\n", ".wfrun/config.yaml must be a mapping"),
    ],
)
def test_a_bad_store_choice_is_one_line_exit_2(
    project: Path, args: tuple[str, ...], env: dict[str, str], config: str | None, phrase: str
) -> None:
    if config is not None:
        (project / ".wfrun" / "config.yaml").write_text(config)
    done = wfrun(project, *args, "run", "greet", "-i", "name=ada", env=env)
    assert done.returncode == 2, done.stderr
    assert phrase in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr
    assert PASSWORD not in done.stderr
    assert not (project / ".wfrun" / "runs").exists() or not any(
        (project / ".wfrun" / "runs").iterdir())


def test_an_unreachable_database_is_one_masked_line(project: Path) -> None:
    dead = f"postgresql://wfrun:{PASSWORD}@127.0.0.1:1/wfrun?connect_timeout=1"
    done = wfrun(project, "--store", dead, "run", "greet", "-i", "name=ada")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert PASSWORD not in done.stderr
    assert "wfrun:***@127.0.0.1:1" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_prune_on_postgres_forgets_the_pruned_runs_rows(
    project: Path, url: str, tmp_path: Path
) -> None:
    clock = FileClock.create(tmp_path / "clock", time.time() - 40 * 86400)
    old = {"WFRUN_CLOCK_FILE": str(clock.path)}
    done = wfrun(project, "--store", url, "run", "greet", "-i", "name=old", env=old)
    assert done.returncode == 0, done.stderr
    clock.set(time.time())
    queued = wfrun(project, "--store", url, "start", "greet", "-i", "name=later", env=old)
    assert queued.returncode == 0, queued.stderr
    pruned = wfrun(project, "--store", url, "prune", "--older-than", "30d", "--yes", env=old)
    assert pruned.returncode == 0, pruned.stderr
    assert "removed" in pruned.stdout
    assert _launches(url) == [("greet", "queued")]  # the old run's row went, not the queued
    assert PASSWORD not in pruned.stdout + pruned.stderr
