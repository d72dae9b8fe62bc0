"""The path a reader walks for one queued run: functions and files entered, and the
callbacks that carry control back up a layer (issue 36, "Prove it").

    .venv/bin/python bench/bench_path.py             # one warm queued 3-node run
    .venv/bin/python bench/bench_path.py --list      # and every function, by file
    .venv/bin/python bench/bench_path.py --root DIR  # `runner` from DIR (`git archive
                                                     # C runner | tar -x -C DIR`)
    .venv/bin/python bench/bench_path.py --smoke     # the same, for the test suite

One run of the trivial 3-node chain (fixtures/workflows/chain3.yaml) on a SQLite
workspace with folder bundles, the way `wfrun start` queues it and a host runs it:
`prepare` (the enqueue), `claim_next`, `execute`, on the coordinator `wfrun host`
builds (`detached_coordinator`). A first run warms every cache (the compiled
definition, the templates, lazy imports) in a settled project (as a host's is: no
folder changed in the last second, benchkit.settled_project); the second is traced
with `sys.setprofile` on every thread (`threading.setprofile` too: the lease keeper's).

Counted, for functions defined under `runner/` only (the stdlib and sqlite3 are the
same for every design):
- functions entered: distinct code objects (a function entered twice counts once);
- files: distinct modules those live in; calls: every entry, repeats included;
- up-layer callbacks: distinct caller -> callee pairs where the callee lives in a
  higher layer than its caller (the nearest `runner/` frame up the stack) by the
  import-linter `layers` contracts in pyproject.toml: DESIGN §2's (cli -> host ->
  launch | controllers -> engine | store -> compiler) and each package's own
  (engine, host, ui). Such a call is a closure or object handed down and called
  back: control goes back up a layer that its caller may not import.
Counts are deterministic for one tree; they do not depend on the machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import CHAIN3, REPO, machine, settled_project, use_root

Layering = list[list[str]]  # top layer first, each a list of module prefixes


def layerings(pyproject: Path) -> list[tuple[str, Layering]]:
    """The `layers` contracts of import-linter, as module prefixes per layer."""
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    found = []
    for contract in contracts:
        if contract.get("type") != "layers":
            continue
        containers = contract.get("containers") or [""]
        for container in containers:
            layers = []
            for layer in contract["layers"]:
                names = [n.strip() for n in layer.replace(":", "|").split("|")]
                layers.append([f"{container}.{n}" if container else n for n in names])
            found.append((contract["id"] if len(containers) == 1 else
                          f"{contract['id']}:{container}", layers))
    return found


def rank(layers: Layering, module: str) -> int | None:
    """The layer `module` is in (0 = the top), None if the contract leaves it out."""
    for i, names in enumerate(layers):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    return None


@dataclass
class Path_:
    """What the profiler saw: runner code only."""

    root: Path
    calls: Counter[CodeType] = field(default_factory=Counter)
    edges: set[tuple[CodeType, CodeType]] = field(default_factory=set)
    _modules: dict[str, str | None] = field(default_factory=dict)

    def module(self, code: CodeType) -> str | None:
        name = code.co_filename
        if name not in self._modules:
            try:
                rel = Path(name).resolve().relative_to(self.root)
            except ValueError:
                self._modules[name] = None
            else:
                parts = list(rel.with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                self._modules[name] = ".".join(parts) if parts[:1] == ["runner"] else None
        return self._modules[name]

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if self.module(code) is None:
            return
        self.calls[code] += 1
        caller = frame.f_back
        while caller is not None and self.module(caller.f_code) is None:
            caller = caller.f_back  # through the stdlib (threading, a sqlite3 callback)
        if caller is not None:
            self.edges.add((caller.f_code, code))


def traced(work: Callable[[], Any], seen: Path_) -> None:
    threading.setprofile(seen.profile)
    sys.setprofile(seen.profile)
    try:
        work()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def one_run(folder: Path) -> Callable[[], Any]:
    """A workspace with the chain queued and run once (warm); returns the next run."""
    from runner.compiler import build_catalog
    from runner.host.runtime._launches import detached_coordinator
    from runner.host.runtime._local import Workspace
    from runner.store import SqliteStore

    root = folder / "proj"
    # As a host's project is: settled (a folder changed within a second of a scan
    # makes every compile re-scan the folders: benchkit.settled_project).
    settled_project(root, {"chain3.yaml": CHAIN3})
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
    store = SqliteStore(root / ".wfrun" / "state" / "store.sqlite3")
    coordinator = detached_coordinator(ws, store)

    def run() -> Any:
        coordinator.prepare("chain3", {})
        record = coordinator.claim_next(None)
        assert record is not None, "the queued run was not claimed"
        outcome = coordinator.execute(record)
        if outcome is None or outcome.status != "completed":
            raise SystemExit(f"the traced run did not complete: {outcome}")
        return outcome

    run()  # warm
    return run


def report(seen: Path_, layered: list[tuple[str, Layering]], listing: bool) -> None:
    modules = {seen.module(c) for c in seen.calls}
    print(f"functions entered: {len(seen.calls)} in {len(modules)} files "
          f"({sum(seen.calls.values())} calls)")
    ups: dict[str, list[tuple[CodeType, CodeType]]] = {}
    for caller, callee in sorted(seen.edges, key=lambda e: (e[0].co_filename, e[0].co_name)):
        for cid, layers in layered:
            a, b = rank(layers, seen.module(caller) or ""), rank(layers, seen.module(callee) or "")
            if a is not None and b is not None and b < a:
                ups.setdefault(cid, []).append((caller, callee))
                break  # counted once, under the outermost contract it crosses
    total = sum(len(v) for v in ups.values())
    print(f"up-layer callbacks: {total}"
          + "".join(f"; {cid} {len(v)}" for cid, v in ups.items()))
    for cid, pairs in ups.items():
        for caller, callee in pairs:
            print(f"  [{cid}] {seen.module(caller)}.{caller.co_qualname} -> "
                  f"{seen.module(callee)}.{callee.co_qualname}")
    if listing:
        by_file: dict[str, list[CodeType]] = {}
        for code in seen.calls:
            by_file.setdefault(seen.module(code) or "?", []).append(code)
        for module in sorted(by_file):
            names = sorted(c.co_qualname for c in by_file[module])
            print(f"  {module} ({len(names)}): {', '.join(names)}")


def main() -> int:
    root = use_root()  # takes `--root DIR` off sys.argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--list", action="store_true", help="print every function entered")
    parser.add_argument("--smoke", action="store_true", help="the same (a run is small)")
    args = parser.parse_args(sys.argv[1:])
    print(f"# bench_path: one warm queued 3-node run, runner from {root}")
    print(f"# {machine()}")
    with tempfile.TemporaryDirectory(prefix="wfrun-path-") as tmp:
        run = one_run(Path(tmp))
        seen = Path_(root.resolve())
        traced(run, seen)
    report(seen, layerings(REPO / "pyproject.toml"), args.list)
    return 0


if __name__ == "__main__":
    sys.exit(main())
