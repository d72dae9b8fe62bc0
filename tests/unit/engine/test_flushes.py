"""Which trace writes a folder bundle flushes: a node's end is fsync'd before the next
node runs only where running that node again would show outside the run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from bundlespaces import CHAIN3


def _flushed(env: Any, monkeypatch: pytest.MonkeyPatch, text: str) -> list[str]:
    """Run `text`; for each fsync of the trace, the event its last line holds
    (type:node). The real fsync runs; this only records what it covered."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if path.name == "trace.jsonl":
            last = path.read_text().splitlines()[-1]
            event = json.loads(last)
            seen.append(f"{event['type']}:{event.get('node', '')}")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    out = env.engine().start(env.workflow(text))
    monkeypatch.undo()
    assert out.status == "completed", out
    return seen


def test_pure_compute_ends_ride_on_the_next_flush(env: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    flushed = _flushed(env, monkeypatch, CHAIN3)
    # run_started (the input is durable first), then the ending with c's end; a's and
    # b's ends are written (with the next start) but not flushed on their own.
    assert flushed == ["run_started:", "run_completed:"]


def test_an_effectful_nodes_end_is_flushed_before_the_next_node_runs(
        env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    env.write("hooks.py", "def side(ctx):\n    return 7\n")
    flushed = _flushed(env, monkeypatch, """
        start: a
        nodes:
          a: {compute: "{{ 1 }}"}
          b: {action: {shell: ["true"]}}
          c: {compute: "{{ 2 }}"}
          d: {compute: {call: "./hooks.py:side"}}
          e: {compute: "{{ outputs.d }}"}
        edges:
          - {from: a, to: b}
          - {from: b, to: c}
          - {from: c, to: d}
          - {from: d, to: e}
    """)
    # The shell step's end and the hook's end (a hook may do anything) are each
    # flushed with the next node's start, before that node runs; pure ends are not.
    assert flushed == ["run_started:", "node_started:c", "node_started:e",
                       "run_completed:"]


def test_a_folder_run_flushes_its_trace_twice_and_its_final_manifest_once(
        env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first manifest is not fsync'd (run_started carries it) and the final one is
    rewritten in place: no temp file, no rename (ADR 0009, levers 4 and 5)."""
    synced: list[str] = []
    renamed: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if path.parent.name != ".snapshots":  # the definition's shared copy, made once
            synced.append(path.name)
        real_fsync(fd)

    def replace(src: Any, dst: Any, **kw: Any) -> None:
        renamed.append(Path(dst).name)
        real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    out = env.engine().start(env.workflow(CHAIN3))
    monkeypatch.undo()
    assert out.status == "completed", out
    assert synced == ["trace.jsonl", "trace.jsonl", "manifest.json"]
    assert renamed == []
    manifest = json.loads((env.runs / out.run_id / "manifest.json").read_text())
    assert (manifest["status"], manifest["finished_at"]) == ("completed",
                                                             out.state.finished_at)
