"""The definition digest: formatting never changes it, meaning always does (DESIGN §3)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from compiler_corpus import VALID

from runner.compiler import Compiler

BASE = """\
title: "fix {{ input.task }}"
start: plan
nodes:
  plan:
    agent:
      prompt: "Plan how to {{ input.task }}."
      output: {type: object, required: [steps]}
    timeout: 30m
  count:
    compute: {call: "./hooks.py:count"}
  check:
    action: {shell: [make, test], allow_nonzero_exit: true}
    retry: {attempts: 2, backoff: 1s}
  done:
    notify: {kind: final, message: Done.}
includes:
  fix: {workflow: ./child.yaml, input: {issue: "{{ outputs.check.stderr }}"}}
edges:
  - {from: plan, to: count}
  - {from: count, to: check}
  - {from: check, switch: {on: $result.outcome, cases: {ok: done}, default: fix}}
  - {from: fix.fixed, to: check}
"""

# Same meaning: keys reordered at every level, comments, block style, other quoting,
# other indentation, a document marker and trailing blanks.
SAME = """\
---
# A comment at the top.
edges:   # edges first this time, and in another order
- to: check
  from: count
- from: plan
  to: count
- from: check
  switch:
    default: fix
    cases:
      ok: done
    on: '$result.outcome'
- {to: check, from: fix.fixed}
includes:
    fix:
        input:
            issue: '{{ outputs.check.stderr }}'
        workflow: './child.yaml'
nodes:
    done:
        notify:
            message: "Done."
            kind: "final"
    check:
        retry:
            backoff: 1s
            attempts: 2
        action:
            allow_nonzero_exit: true
            shell:
            - "make"
            - 'test'
    count:
        compute:
            call: ./hooks.py:count
    plan:
        timeout: "30m"
        agent:
            output:
                required:
                - steps
                type: object
            prompt: >-
                Plan how to {{ input.task }}.
start: "plan"
title: 'fix {{ input.task }}'


"""

CHILD = """\
start: repair
nodes:
  repair: {agent: "Repair {{ input.issue }}."}
exits:
  fixed: repair
"""

HOOKS = "def count(context):\n    return 3\n"


def _write(folder: Path, text: str, child: str = CHILD, hooks: str = HOOKS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "child.yaml").write_text(child)
    (folder / "hooks.py").write_text(hooks)
    path = folder / "flow.yaml"
    path.write_text(text)
    return path


def _digest(path: Path) -> str:
    result = Compiler().compile_path(path)
    assert result.valid, result.diagnostics
    assert result.definition is not None
    return result.definition.digest


def test_base_compiles_with_everything_that_feeds_the_digest(tmp_path: Path) -> None:
    result = Compiler().compile_path(_write(tmp_path, BASE))
    assert result.valid
    assert result.definition is not None
    kinds = {n.kind for n in result.definition.nodes.values()}
    assert {"agent", "compute", "action", "notify", "include_entry", "include_exit"} <= kinds
    sources = {Path(s.path or "").name for s in result.definition.sources}
    assert sources == {"flow.yaml", "hooks.py", "child.yaml"}


def test_formatting_keeps_the_digest(tmp_path: Path) -> None:
    assert _digest(_write(tmp_path / "a", BASE)) == _digest(_write(tmp_path / "b", SAME))


def test_child_formatting_keeps_the_digest(tmp_path: Path) -> None:
    reformatted = ("# the child, reformatted\nexits: {fixed: {from: repair}}\nnodes:\n"
                   "  repair:\n    agent:\n      prompt: 'Repair {{ input.issue }}.'\n"
                   "start: repair\n")
    assert _digest(_write(tmp_path / "a", BASE)) == _digest(
        _write(tmp_path / "b", BASE, child=reformatted))


@pytest.mark.parametrize(("old", "new"), [
    ("Plan how to", "Plan how we"),                      # a prompt word
    ("{from: fix.fixed, to: check}", "{from: fix.fixed, to: plan}"),  # an edge
    ("timeout: 30m", "timeout: 31m"),                    # a timeout
    ("timeout: 30m", "timeout: null"),                   # no deadline is a meaning too
    ("attempts: 2", "attempts: 3"),                      # retry
    ("cases: {ok: done}", "cases: {ok: done, failed: done}"),  # a switch case
    ("allow_nonzero_exit: true", "allow_nonzero_exit: false"),
    ("required: [steps]", "required: [plan]"),           # an output schema
    ('title: "fix', 'title: "mend'),                     # the title template
    ("start: plan", "start: plan\nmax_steps: 99"),       # an added default-changing key
])
def test_meaning_changes_the_digest(tmp_path: Path, old: str, new: str) -> None:
    assert BASE.count(old) == 1
    changed = BASE.replace(old, new)
    assert _digest(_write(tmp_path / "a", BASE)) != _digest(_write(tmp_path / "b", changed))


def test_included_child_content_changes_the_digest(tmp_path: Path) -> None:
    child = CHILD.replace("Repair", "Mend")
    assert _digest(_write(tmp_path / "a", BASE)) != _digest(
        _write(tmp_path / "b", BASE, child=child))


def test_hook_file_bytes_change_the_digest(tmp_path: Path) -> None:
    # Even a comment: the hook file is source identity, hashed byte for byte.
    assert _digest(_write(tmp_path / "a", BASE)) != _digest(
        _write(tmp_path / "b", BASE, hooks=HOOKS + "# tweak\n"))


def test_same_files_in_two_folders_have_the_same_digest(tmp_path: Path) -> None:
    a = _write(tmp_path / "one", BASE)
    b = _write(tmp_path / "deeper" / "two", BASE)
    ra, rb = Compiler().compile_path(a), Compiler().compile_path(b)
    assert ra.definition is not None
    assert rb.definition is not None
    assert ra.definition.digest == rb.definition.digest
    # ...while the recorded sources still say where each came from.
    assert ra.definition.sources != rb.definition.sources
    assert [s.sha256 for s in ra.definition.sources] == [s.sha256 for s in rb.definition.sources]


@pytest.mark.parametrize("name", ["compute_forms.yaml", "action_forms.yaml", "review.yaml",
                                  "nested_outer.yaml"])
def test_fixture_copied_with_its_files_keeps_its_digest(tmp_path: Path, name: str) -> None:
    copy = tmp_path / "elsewhere"
    shutil.copytree(VALID, copy)
    assert _digest(VALID / name) == _digest(copy / name)


def test_digest_is_the_sha256_of_the_canonical_snapshot(tmp_path: Path) -> None:
    import hashlib
    import json

    result = Compiler().compile_path(_write(tmp_path, BASE))
    assert result.definition is not None
    canonical = json.dumps(result.definition.snapshot(), sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    assert result.definition.digest == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
