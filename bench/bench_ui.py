"""`wfrun ui` figures (issue 14): the runs list with 10,000 runs, and how fast a trace
write reaches the page.

    .venv/bin/python bench/bench_ui.py                 # both figures
    .venv/bin/python bench/bench_ui.py --runs 2000     # a smaller project
    .venv/bin/python bench/bench_ui.py --check         # exit 1 if an aim is missed
    .venv/bin/python bench/bench_ui.py --json

Setup: a temporary project; one real `wfrun run` makes a template bundle, then
`--runs` launch rows go through the real store API (enqueue -> claim -> running ->
done, every 7th cancelled while queued, every 13th left queued), and each done
one gets a bundle copied from the template under its own run id. A real
`wfrun ui` subprocess serves the project; Debian's chromium (Playwright) loads it.

(a) runs list: the HTTP time of `/runs` pages (first, deep, filtered, oldest first)
    and, in the browser, navigation start -> load event with the 50-row table
    drawn. For contrast, the fold of every bundle that `wfrun runs` does.
(b) live update: a real run holds at a node; its runner is SIGKILLed, so nothing
    else writes the trace, and the bench appends `update_published` progress events
    to the trace as the engine does (one JSON line, fsync). Latency is from just
    before the write to the page's script having drawn that event (Date.now() in a
    MutationObserver on the page's `data-seq`, same machine clock).

Aims (issue 14): the runs page renders in < 1 s; p95 update latency < 200 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from bench.benchkit import machine  # noqa: E402
from runner.clock import FakeClock  # noqa: E402
from runner.engine import RunReader  # noqa: E402
from runner.host.runtime._views import list_runs  # noqa: E402
from runner.store import NewLaunch, SqliteStore  # noqa: E402

QUICK = """\
name: quick
title: "quick {{ input.n }}"
start: one
nodes:
  one:
    compute: "{{ {'n': input.n} }}"
"""
HOLD = """\
name: hold
title: hold for the latency figure
start: hold
nodes:
  hold:
    action:
      # The bench SIGKILLs the run, so nothing stops this step but the release file,
      # which the project's removal may beat: it also ends once the project is gone.
      shell: 'while [ ! -f release ]; do [ -d "$PWD" ] || exit 0; sleep 0.1; done'
      use_shell: true
"""
WATCH_SEQ = """() => {
  window.__seen = {};
  const record = () => { window.__seen[document.body.dataset.seq] = Date.now(); };
  new MutationObserver(record).observe(document.body,
    {attributes: true, attributeFilter: ['data-seq']});
  record();
}"""


def wfrun(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", "--project", str(root), *args],
                          capture_output=True, text=True, cwd=root, timeout=120)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def make_runs(root: Path, count: int) -> dict[str, int]:
    done = wfrun(root, "run", "quick", "-i", "n=0")
    assert done.returncode == 0, done.stderr
    runs = root / ".wfrun" / "runs"
    (template_id,) = [p.name for p in runs.iterdir() if not p.name.startswith(".")]
    template = {p.name: p.read_bytes() for p in (runs / template_id).iterdir()
                if p.is_file() and not p.name.startswith(".")}
    clock = FakeClock(2_000_000_000.0)
    store = SqliteStore(root / ".wfrun" / "state" / "store.sqlite3", clock=clock)
    made = {"done": 0, "cancelled": 0, "queued": 0}
    for i in range(count):
        clock.advance(1.0)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock.now()))
        run_id = f"quick-{stamp}-{i:08x}"
        store.launches.enqueue(NewLaunch(
            run_id=run_id, workflow_ref="quick", definition_digest="sha256:" + "0" * 64,
            source={"kind": "file", "path": str(root / "quick.yaml"), "sha256": "0" * 64},
            input={"n": i}))
        if i % 13 == 5:
            made["queued"] += 1
            continue
        if i % 7 == 3:
            store.launches.cancel(run_id)
            made["cancelled"] += 1
            continue
        claimed = store.launches.claim(run_id, runner_id="bench:1")
        token = getattr(claimed, "claim_token", None)
        assert token is not None, claimed
        store.launches.mark_running(run_id, token)
        store.launches.finish(run_id, token)
        bundle = runs / run_id
        bundle.mkdir(mode=0o700)
        for name, data in template.items():
            data = data.replace(template_id.encode(), run_id.encode())
            data = data.replace(b'"quick 0"', f'"quick {i}"'.encode())
            (bundle / name).write_bytes(data)
        made["done"] += 1
    store.close()
    return made


class Ui:
    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "--project", str(root), "ui"], cwd=root,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"(http://\S+)", line)
        assert found is not None, line
        # The printed URL carries the console's token (`?token=`): reads need none.
        self.base = found[1].split("?", 1)[0].rstrip("/")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def runs_list(root: Path, ui: Ui, browser: Any, count: int,
              loads: tuple[int, int] = (15, 8)) -> dict[str, Any]:
    """`loads`: timed HTTP gets and browser loads per page."""
    middle = max(1, count // 100)  # of count / 50 pages
    pages = {"first page": "/runs", f"page {middle}": f"/runs?page={middle}",
             "cancelled only": "/runs?status=cancelled",
             "oldest first, last": f"/runs?workflow=quick&order=oldest&page={max(1, count // 50)}"}
    out: dict[str, Any] = {"http_ms": {}, "browser_ms": {}}
    with httpx.Client(timeout=30) as client:
        for name, path in pages.items():
            client.get(ui.base + path).raise_for_status()  # warm
            times = []
            for _ in range(loads[0]):
                t0 = time.perf_counter()
                r = client.get(ui.base + path)
                times.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200
            out["http_ms"][name] = {"median": statistics.median(times), "p95": pct(times, .95),
                                    "max": max(times)}
    page = browser.new_page()
    for name, path in pages.items():
        times = []
        for _ in range(loads[1]):
            page.goto(ui.base + path, wait_until="load")
            page.wait_for_selector("#runs tbody tr")
            times.append(page.evaluate(
                "performance.getEntriesByType('navigation')[0].loadEventEnd"))
        out["browser_ms"][name] = {"median": statistics.median(times), "p95": pct(times, .95),
                                   "max": max(times)}
    page.close()
    t0 = time.perf_counter()
    folded = list_runs(RunReader(root / ".wfrun" / "runs"))
    out["fold_every_bundle_ms"] = (time.perf_counter() - t0) * 1000
    out["bundles"] = len(folded)
    return out


def update_latency(root: Path, ui: Ui, browser: Any, samples: int) -> dict[str, Any]:
    runner = subprocess.Popen([sys.executable, "-m", "runner", "--project", str(root), "run",
                               "hold"], cwd=root, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    runs = root / ".wfrun" / "runs"
    trace = None
    deadline = time.monotonic() + 60
    while trace is None:
        assert time.monotonic() < deadline, "the hold run did not start"
        for p in runs.glob("hold-*/trace.jsonl"):
            if b'"node_started"' in p.read_bytes():
                trace = p
        time.sleep(0.02)
    runner.send_signal(signal.SIGKILL)  # from here on only the bench writes the trace
    runner.wait()
    run_id = trace.parent.name
    seq = len(trace.read_bytes().splitlines())
    page = browser.new_page()
    page.goto(f"{ui.base}/runs/{run_id}")
    page.wait_for_selector(f'body[data-seq="{seq}"]')
    page.evaluate(WATCH_SEQ)
    latencies = []
    for i in range(samples):
        seq += 1
        event = {"at": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()), "node": "hold",
                 "attempt": "bench", "payload": {"type": "progress", "key": "bench",
                                                 "data": {"completed": i + 1,
                                                          "total": samples}},
                 "run_id": run_id, "schema": "wfrun.trace-event.v1", "seq": seq,
                 "type": "update_published"}
        line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        wrote = time.time() * 1000
        fd = os.open(trace, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        # The observer stamped the moment the page drew it; this wait only collects it.
        page.wait_for_selector(f'body[data-seq="{seq}"]', state="attached")
        latencies.append(page.evaluate(f"window.__seen['{seq}']") - wrote)
        time.sleep(0.03)  # let the next write land in a later poll than this one
    assert page.locator("#progress .bar").count() == 1
    page.close()
    return {"samples": samples, "median": statistics.median(latencies),
            "p95": pct(latencies, .95), "max": max(latencies)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true",
        help="tiny sizes: the script runs, figures mean nothing (tests use it)")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.samples = 30, 2
    chromium = shutil.which("chromium")
    if chromium is None:
        print("bench_ui: chromium is not installed (./scripts/setup installs it)",
              file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="wfrun-bench-ui-") as tmp:
        root = Path(tmp) / "proj"
        (root / ".wfrun" / "workflows").mkdir(parents=True)
        (root / ".wfrun" / "workflows" / "quick.yaml").write_text(QUICK)
        (root / ".wfrun" / "workflows" / "hold.yaml").write_text(HOLD)
        t0 = time.perf_counter()
        made = make_runs(root, args.runs)
        setup_s = time.perf_counter() - t0
        ui = Ui(root)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=chromium,
                                             args=["--no-sandbox", "--disable-gpu"])
                listing = runs_list(root, ui, browser, args.runs, (2, 1) if args.smoke else (15, 8))
                live = update_latency(root, ui, browser, args.samples)
                browser.close()
        finally:
            ui.stop()
            (root / "release").write_text("go")
    result = {"machine": machine(), "runs": args.runs, "made": made, "setup_s": setup_s,
              "runs_list": listing, "update_latency_ms": live}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"machine: {result['machine']}")
        print(f"project: {args.runs} launch rows {made}, {listing['bundles']} bundles "
              f"(setup {setup_s:.0f} s)")
        print("(a) runs list            HTTP median / p95      browser load median / p95")
        for name in listing["http_ms"]:
            h, b = listing["http_ms"][name], listing["browser_ms"][name]
            print(f"    {name:22} {h['median']:7.1f} / {h['p95']:6.1f} ms    "
                  f"{b['median']:7.1f} / {b['p95']:6.1f} ms")
        print(f"    for contrast, folding every bundle (`wfrun runs`): "
              f"{listing['fold_every_bundle_ms']:.0f} ms")
        print(f"(b) trace write -> page drawn, {live['samples']} updates: median "
              f"{live['median']:.1f} ms, p95 {live['p95']:.1f} ms, max {live['max']:.1f} ms")
    if args.check:
        worst = max(b["p95"] for b in listing["browser_ms"].values())
        ok = worst < 1000 and live["p95"] < 200
        print("aims met" if ok else "aim missed", file=sys.stderr)
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
