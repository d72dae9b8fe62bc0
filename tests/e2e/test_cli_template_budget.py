"""The template budget through the real CLI (issue 10 item 1): `validate` rejects what
is constant, `run` fails a node cleanly on what comes from the input, with peak memory
measured on the real child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from everyday import Project

#: Runs `argv` and reports its ru_maxrss to the file named first. A child's ru_maxrss
#: counts its parent's peak too (vfork or fork, then exec, records the high-water mark
#: of the memory it shared or copied), and a pytest worker may hold hundreds of MB
#: after other tests: spawned by this small wrapper, `wfrun` counts a few MB of it.
_WRAPPER = """\
import os, resource, subprocess, sys
cap = int(sys.argv[2])
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
child = subprocess.Popen(sys.argv[3:], preexec_fn=limit if cap else None)
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as fh:
    fh.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _measured(argv: list[str], cwd: Path, env: dict[str, str], *, cap_gib: int = 0
              ) -> tuple[subprocess.CompletedProcess[str], float]:
    """`argv` run to its end, and its own peak RSS in MiB (`cap_gib`: its address-space
    cap, so a regression fails with MemoryError instead of swapping the host)."""
    usage = cwd / "maxrss.txt"
    done = subprocess.run([sys.executable, "-c", _WRAPPER, str(usage), str(cap_gib * 2**30),
                           *argv], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=env)
    return done, int(usage.read_text()) / 1024


REPEAT = """\
    start: a
    input:
      type: object
      properties: {s: {type: string}, n: {type: integer}}
    nodes:
      a:
        compute: "{{ input.s * input.n }}"
    """


def test_run_fails_the_node_on_a_huge_repetition_with_bounded_memory(tmp_path: Path) -> None:
    project = Project(tmp_path)
    project.workflow("repeat", REPEAT)
    argv = project.argv("run", "repeat", "-q", "--json", "--input",
                        json.dumps({"s": "ab" * 50, "n": 10**9}))
    proc, peak_mib = _measured(argv, project.root, {**os.environ, "COLUMNS": "80"})
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 1, (out, err)
    assert "Traceback" not in out + err
    outcome = json.loads(out)
    assert outcome["status"] == "failed"
    text = json.dumps(outcome)
    assert "template_budget.max_size" in text
    # 100 characters times 10^9 would be 100 GB; the check happens before allocating.
    assert peak_mib < 300, f"peak RSS {peak_mib:.0f} MiB"
    assert not any(p.stat().st_size > 1024 * 1024 for p in project.runs_dir.rglob("*")
                   if p.is_file())


def test_validate_rejects_constant_abuse_with_positions(tmp_path: Path) -> None:
    project = Project(tmp_path)
    project.workflow("abuse", """\
        start: a
        nodes:
          a:
            compute: "{{ 7**999999999 }}"
          b:
            notify:
              message: "{{ lipsum(10**6) }}"
          c:
            agent: "{% for i in range(10**5) %}{% for j in range(10**5) %}{% endfor %}{% endfor %}"
        edges:
          - {from: a, to: b}
          - {from: b, to: c}
        """)
    done = project.wfrun("validate", "abuse", "--format", "json", timeout=60)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    diags = [d for f in report["files"] for d in f["diagnostics"]]
    found = sorted((d["code"], d["line"]) for d in diags)
    assert found == [("template-budget", 4), ("template-budget", 7), ("template-budget", 9)]
    assert "Traceback" not in done.stderr


def test_validate_refuses_constant_bombs_without_allocating_them(tmp_path: Path) -> None:
    # Issue 35 item 3: each of these, one line of YAML, cost 1.9-3.8 GB at validate.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from template_bombs import PAYLOADS, constant

    project = Project(tmp_path)
    names = sorted(PAYLOADS)
    nodes = "".join(f"  n{i}:\n    compute: {json.dumps(constant(PAYLOADS[name]))}\n"
                    for i, name in enumerate(names))
    edges = "".join(f"  - {{from: n{i}, to: n{i + 1}}}\n" for i in range(len(names) - 1))
    project.workflow("bombs", f"start: n0\nnodes:\n{nodes}edges:\n{edges}")

    # A regression fails as MemoryError under the wrapper's 3 GiB cap, not by swapping.
    proc, peak_mib = _measured(project.argv("validate", "bombs", "--format", "json"),
                               project.root, dict(os.environ), cap_gib=3)
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 1, err[-2000:]
    assert "Traceback" not in err
    diags = [d for f in json.loads(out)["files"] for d in f["diagnostics"]]
    lines = sorted(d["line"] for d in diags if d["code"] == "template-budget")
    assert lines == [4 + 2 * i for i in range(len(names))], diags
    assert peak_mib < 300, f"peak RSS {peak_mib:.0f} MiB"


def test_a_workflow_budget_applies_at_run_time(tmp_path: Path) -> None:
    project = Project(tmp_path)
    project.workflow("tight", """\
        template_budget: {max_size: 1000}
        start: a
        nodes:
          a:
            compute: "{{ input.s * 2000 }}"
        """)
    done = project.wfrun("run", "tight", "-q", "--json", "-i", "s=x")
    assert done.returncode == 1, done.stderr
    assert "over the budget of 1,000" in done.stdout
    assert project.wfrun("validate", "tight").returncode == 0


DUNDER = """\
    start: a
    nodes:
      a:
        compute: "EXPR"
    """


def test_an_input_naming_a_dunder_fails_the_node_not_the_run_machinery(
        tmp_path: Path) -> None:
    # The sandbox hands back an "unsafe" undefined; reading it raised SecurityError past
    # the template layer: "the run crashed (SecurityError)" and a traceback (issue 35).
    project = Project(tmp_path)
    for expr in ("{{ input | attr(input.k) }}", "{{ {'got': input | attr(input.k)} }}"):
        project.workflow("dunder", DUNDER.replace("EXPR", expr))
        done = project.wfrun("run", "dunder", "-q", "--json", "--input",
                             json.dumps({"k": "__class__"}))
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stdout + done.stderr
        outcome = json.loads(done.stdout)
        assert outcome["status"] == "failed"
        assert outcome["error"]["code"] == "template_error", outcome
        assert "access to attribute '__class__' of 'dict' object is unsafe" in \
            outcome["error"]["message"]
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
