"""Template bombs at N = 10^10 (issue 35 item 3): refused before they allocate?

    .venv/bin/python bench/bench_template_bombs.py            # every payload
    .venv/bin/python bench/bench_template_bombs.py --smoke    # three, for CI

Each payload of tests/template_bombs.py renders once in its own interpreter, with
N = 10^10 from the run input, under the default budget. Printed per payload: refused
or not (and the budget limit that refused it), the peak RSS the render added over the
interpreter (getrusage, measured in the child after its imports), and the time the
render took against the budget's seconds. Aims: refused, <= 100 MB, within budget.
An address-space cap of 2 GiB keeps a regression from swapping the machine: it then
shows as a MemoryError. Then the same payloads as constants through `check_budget`
(what `wfrun validate` and the web view's catalog run), with their time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from template_bombs import BOMB_N, PAYLOADS, constant  # noqa: E402

from runner.compiler._budget import DEFAULT_BUDGET  # noqa: E402
from runner.compiler._template_checks import check_budget  # noqa: E402

SMOKE = ("format_width", "translate", "list_of_chars")
AIM_MIB = 100

CHILD = """
import json, resource, sys, time
cap = 2 * 2**30
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
sys.path.insert(0, "tests")
from template_bombs import context, runtime
from runner.compiler._templates import TemplateError, render_text
render_text("{{ 1 }}", {})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
try:
    render_text(runtime(sys.argv[1]), context())
    ended = "rendered"
except TemplateError as exc:
    ended = str(exc)
except MemoryError:
    ended = "MemoryError"
took = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"ended": ended, "grew_kib": after - before, "seconds": took}))
"""


def run_one(payload: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", CHILD, payload], cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        return {"ended": f"exit {done.returncode}: {done.stderr.strip()[-200:]}",
                "grew_kib": 0, "seconds": 0.0}
    out: dict[str, object] = json.loads(done.stdout)
    return out


def _limit(ended: str) -> str:
    for key in ("max_size", "max_output", "max_iterations", "seconds"):
        if f"template_budget.{key}" in ended:
            return key
    return "time at validate" if "take over" in ended else ended[:60]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help=f"only {', '.join(SMOKE)}")
    args = parser.parse_args()
    names = SMOKE if args.smoke else tuple(PAYLOADS)
    print(f"N = {BOMB_N:.0e}, budget {DEFAULT_BUDGET.seconds:g} s and "
          f"{DEFAULT_BUDGET.max_size:,} per value; aim: refused, <= {AIM_MIB} MB, in budget")
    print(f"{'payload':<18} {'run time':<34} {'peak RSS +MB':>12} {'seconds':>8}  validate")
    missed = 0
    for name in names:
        got = run_one(PAYLOADS[name])
        ended = str(got["ended"])
        refused = ended.startswith("over the template budget")
        grew = int(str(got["grew_kib"])) / 1024
        seconds = float(str(got["seconds"]))
        start = time.perf_counter()
        problem = check_budget(constant(PAYLOADS[name]))
        validate = time.perf_counter() - start
        verdict = f"refused ({_limit(ended)})" if refused else f"NOT REFUSED: {ended[:40]}"
        print(f"{name:<18} {verdict:<34} {grew:>12.1f} {seconds:>8.3f}  "
              f"{'refused' if problem else 'PASSED'} in {validate:.3f} s")
        missed += (not refused) or grew > AIM_MIB or seconds > DEFAULT_BUDGET.seconds \
            or problem is None
    print(f"{missed} of {len(names)} payloads missed an aim")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
