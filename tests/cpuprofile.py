"""Where the suite's CPU goes: a per-test CPU report (opt-in, issue 34 item 11).

Under load the suite is CPU-bound, so its wall time follows the CPU it burns in the
pytest worker and in every process a test starts. Set `WFRUN_TEST_CPU=report.txt`
and run a tier (`WFRUN_TEST_CPU=cpu.txt .venv/bin/pytest -n 2 tests/e2e`): each
test's setup, call and teardown are measured with `getrusage`, and the report lists
the tests, files and tiers by CPU, and the subprocesses by kind and count.

What is counted, per test:
- self: the worker's own CPU (user + system);
- children: CPU of the processes the worker started *and reaped* during the test,
  with all their reaped descendants (a host and the shell steps and agent clients it
  waited for). A process still running when the test ends is counted by the test that
  reaps it; one that is never reaped (a daemon that detached) is not counted at all;
- postgres: the CPU the worker's throwaway Postgres cluster (tests/pgcluster.py)
  spent meanwhile, postmaster and backends (its server is not the worker's child);
- spawns: every `subprocess.Popen` the worker made, by kind (`wfrun <command>` for
  the CLI, the program's name otherwise). Processes forked by the worker's children
  are in their CPU but not in this count.

Session-scoped fixtures are charged to the first test that uses them. Each process
appends a line per test to `<report>.d/<worker>.jsonl`; the controller merges them
into the report at the end (`python tests/cpuprofile.py REPORT` merges what an
interrupted run left).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import pytest

ENV = "WFRUN_TEST_CPU"
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _spawn_kind(args: Any) -> str:
    """`wfrun status` for the CLI however it is started, else the program's name."""
    if isinstance(args, (str, bytes)):
        argv = [os.fsdecode(args)]
    else:
        try:
            argv = [os.fsdecode(a) for a in args]
        except TypeError:
            return "?"
    if not argv:
        return "?"
    name = Path(argv[0]).name
    rest = argv[1:]
    if name.startswith("python") and rest[:2] == ["-m", "runner"]:
        name, rest = "wfrun", rest[2:]
    elif name.startswith("python") and rest[:1] == ["-c"]:
        return "python -c"
    elif name.startswith("python") and rest:
        return f"python {Path(rest[0]).name}"
    if name == "wfrun":
        words = iter(rest)
        for word in words:
            if word in ("--project", "--store"):
                next(words, None)
            elif not word.startswith("-"):
                return f"wfrun {word}"
        return "wfrun"
    if name == "runuser" and "--" in argv:
        return _spawn_kind(argv[argv.index("--") + 1:])
    return name


def _proc_cpu(pid: int) -> tuple[float, int]:
    """(own + reaped children's CPU seconds, parent pid) of a live process."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2:].split()
    # After the command: state ppid ... utime(11) stime(12) cutime(13) cstime(14).
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / _TICK, int(fields[1])


def _postgres_cpu() -> float:
    """CPU of the live throwaway clusters: postmaster (with its reaped backends) and
    the backends still running."""
    import pgcluster  # tests/ is on sys.path once conftest is loaded

    pids = {c.postmaster_pid for c in pgcluster.LIVE if c.postmaster_pid}
    if not pids:
        return 0.0
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            cpu, ppid = _proc_cpu(int(entry.name))
            if int(entry.name) in pids or ppid in pids:
                total += cpu
    return total


class CpuProfile:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.spawns: Counter[str] = Counter()
        self._popen_init = subprocess.Popen.__init__

    def install(self) -> None:
        original = self._popen_init
        spawns = self.spawns

        def counting_init(popen: Any, args: Any, *rest: Any, **kw: Any) -> None:
            spawns[_spawn_kind(args)] += 1
            original(popen, args, *rest, **kw)

        subprocess.Popen.__init__ = counting_init  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        subprocess.Popen.__init__ = self._popen_init  # type: ignore[method-assign]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        self.spawns.clear()
        wall, own, kids = time.monotonic(), _cpu(resource.RUSAGE_SELF), \
            _cpu(resource.RUSAGE_CHILDREN)
        pg = _postgres_cpu()
        yield
        self._write({
            "test": item.nodeid,
            "wall": time.monotonic() - wall,
            "self": _cpu(resource.RUSAGE_SELF) - own,
            "children": _cpu(resource.RUSAGE_CHILDREN) - kids,
            "postgres": max(0.0, _postgres_cpu() - pg),
            "spawns": dict(self.spawns),
        })

    def _write(self, row: dict[str, Any]) -> None:
        """One line per test, appended at once: an interrupted run keeps what it measured."""
        with self.part.open("a") as sink:
            sink.write(json.dumps(row) + "\n")

    @property
    def folder(self) -> Path:
        return Path(f"{self.out}.d")

    @property
    def part(self) -> Path:
        return self.folder / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl"

    def start(self) -> None:
        if "PYTEST_XDIST_WORKER" not in os.environ:  # the controller: a clean folder
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._write({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                     "self": _cpu(resource.RUSAGE_SELF),
                     "children": _cpu(resource.RUSAGE_CHILDREN)})
        if "PYTEST_XDIST_WORKER" in os.environ:
            return
        write_report(self.folder, self.out)
        sys.stderr.write(f"\ncpuprofile: wrote {self.out}\n")


def write_report(folder: Path, out: Path) -> None:
    """Merge the parts in `folder` (one per worker) into the report `out`; also usable
    on the parts an interrupted run left: `python tests/cpuprofile.py REPORT`."""
    rows: list[dict[str, Any]] = []
    totals: list[dict[str, Any]] = []
    for part in sorted(folder.glob("*.jsonl")):
        for line in part.read_text().splitlines():
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                (totals if "worker" in row else rows).append(row)
    if any(t["worker"] != "main" for t in totals):
        # xdist: the controller's children are the workers, already counted.
        totals = [{**t, "children": 0.0} if t["worker"] == "main" else t for t in totals]
    out.write_text(render(rows, totals))


def _cost(row: dict[str, Any]) -> float:
    return float(row["self"] + row["children"] + row["postgres"])


def _table(title: str, groups: Iterable[tuple[str, list[dict[str, Any]]]], limit: int) -> str:
    ranked = sorted(groups, key=lambda g: -sum(_cost(r) for r in g[1]))
    lines = [f"\n## {title}",
             f"{'cpu s':>8} {'self':>7} {'child':>7} {'pg':>6} {'wall s':>7} {'n':>5}  name"]
    for name, rows in ranked[:limit]:
        lines.append(
            f"{sum(_cost(r) for r in rows):8.1f} {sum(r['self'] for r in rows):7.1f} "
            f"{sum(r['children'] for r in rows):7.1f} {sum(r['postgres'] for r in rows):6.1f} "
            f"{sum(r['wall'] for r in rows):7.1f} {len(rows):5d}  {name}")
    return "\n".join(lines)


def render(rows: list[dict[str, Any]], totals: list[dict[str, Any]]) -> str:
    """The report: totals, then tiers, folders, files and tests by CPU, then spawns."""
    by_tier: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_folder: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_file: dict[str, list[dict[str, Any]]] = defaultdict(list)
    spawns: Counter[str] = Counter()
    for row in rows:
        path = row["test"].split("::")[0]
        by_tier["/".join(path.split("/")[:2])].append(row)
        by_folder[path.rsplit("/", 1)[0]].append(row)
        by_file[path].append(row)
        spawns.update(row["spawns"])
    worker_cpu = sum(t["self"] + t["children"] for t in totals)
    tested = sum(r["self"] + r["children"] for r in rows)
    out = [
        "# Suite CPU by test (tests/cpuprofile.py)",
        f"tests: {len(rows)}; CPU in tests: {sum(_cost(r) for r in rows):.1f} s "
        f"(worker {sum(r['self'] for r in rows):.1f}, children "
        f"{sum(r['children'] for r in rows):.1f}, postgres "
        f"{sum(r['postgres'] for r in rows):.1f}); wall in tests "
        f"{sum(r['wall'] for r in rows):.1f} s",
        f"pytest processes' whole CPU (with collection and imports, without postgres): "
        f"{worker_cpu:.1f} s, of it outside tests {worker_cpu - tested:.1f} s",
        _table("tiers", by_tier.items(), 20),
        _table("folders", by_folder.items(), 40),
        _table("files", by_file.items(), 60),
        _table("tests", ((r["test"], [r]) for r in rows), 120),
        "\n## spawns (subprocess.Popen from the workers)",
    ]
    out += [f"{count:8d}  {kind}" for kind, count in spawns.most_common(60)]
    return "\n".join(out) + "\n"


def configure(config: pytest.Config) -> None:
    """Register the profile when `WFRUN_TEST_CPU` names a report (tests/conftest.py)."""
    target = os.environ.get(ENV)
    if not target:
        return
    profile = CpuProfile(Path(target).resolve())
    profile.start()
    profile.install()
    config.pluginmanager.register(profile, "wfrun-cpuprofile")


if __name__ == "__main__":
    report = Path(sys.argv[1])
    write_report(Path(f"{report}.d"), report)
