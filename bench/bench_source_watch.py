"""What the host's source watch costs per update while a queue drains.

    .venv/bin/python bench/bench_source_watch.py             # 200, 1,000 and 5,000 queued
    .venv/bin/python bench/bench_source_watch.py --root DIR  # `runner` from DIR (before)
    .venv/bin/python bench/bench_source_watch.py --smoke     # 5 queued, 1 round

`wfrun host` hands the watch its queued launches at most once per poll interval
(0.5 s) while it drains them (`StandaloneHost._watch_queued` -> `SourceWatch.update`),
one or more launches fewer each time. This starts a real `SourceWatch` (a watchdog
observer) on a temporary project, gives it N queued launches of one workflow (as
preflight records their sources), then calls `update` 100 times, one launch fewer
each time, and prints the CPU (process_time) per call, the median of 3 rounds.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchkit import machine, use_root  # bench/ is on sys.path

ROOT = use_root()  # `--root DIR`: `runner` from DIR (benchkit.use_root)

from runner.compiler import Compiler, Diagnostic, build_catalog  # noqa: E402
from runner.host.runtime._watch import SourceWatch  # noqa: E402
from runner.store import LaunchRecord  # noqa: E402

FLOW = "start: one\nnodes:\n  one: {compute: \"{{ 1 + 1 }}\"}\n"
UPDATES = 100


def records(root: Path, count: int) -> list[LaunchRecord]:
    out = Compiler(build_catalog("workflows", root, None)).compile_name("flow")
    assert not isinstance(out, Diagnostic)
    assert out.definition is not None
    d = out.definition
    source = {"source": d.source.to_json() if d.source else None,
              "sources": [s.to_json() for s in d.sources]}
    return [LaunchRecord(
        run_id=f"flow-{i}", workflow_ref="flow", workflow_path=None, source=source,
        definition_digest=d.digest, input_json="{}", options_json=None, status="queued",
        runner_id=None, claim_token=None, claim_expires_at=None, epoch=0,
        affinity_runner_id=None, origin_session_id=None, parent_run_id=None,
        error_code=None, error_message=None, created_at=0, updated_at=0, started_at=None,
        finished_at=None) for i in range(count)]


def per_update_ms(queued: list[LaunchRecord]) -> float:
    watch = SourceWatch()
    watch.start()
    try:
        watch.update(queued)
        c0 = time.process_time()
        for k in range(1, UPDATES + 1):
            watch.update(queued[k:])  # one launch claimed since the last poll
        return (time.process_time() - c0) * 1000 / UPDATES
    finally:
        watch.stop()


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="wfrun-bench-watch-")) / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "workflows" / "flow.yaml").write_text(FLOW)
    print(f"machine: {machine()}")
    print(f"runner imported from {ROOT}")
    print(f"SourceWatch.update, one launch fewer per call ({UPDATES} calls, median of 3):")
    smoke = "--smoke" in sys.argv[1:]
    for count in (5,) if smoke else (200, 1000, 5000):
        queued = records(root, count + UPDATES)
        ms = statistics.median(per_update_ms(queued) for _ in range(1 if smoke else 3))
        print(f"  {count:>5} queued: {ms:8.3f} ms CPU per update")
    return 0


if __name__ == "__main__":
    sys.exit(main())
