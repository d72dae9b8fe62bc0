"""The bundle-space conformance suite (tests/bundlespaces.py) on folders and on the
in-memory rows fake (`MemoryRows`); tests/integration/store/test_bundles_postgres.py
runs it on Postgres."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from bundlespaces import *  # noqa: F403  (the conformance tests)
from bundlespaces import Holder, Kit

from runner.engine.rows import MemoryRows


@pytest.fixture(params=["folder", "memory"])
def kit(request: pytest.FixtureRequest, tmp_path: Path) -> Kit:
    runs = tmp_path / "runs"
    if request.param == "folder":
        def hold_folder(_run_id: str) -> Holder:
            held = {"yes": True}
            return Holder(fence=lambda: held["yes"], revoke=lambda: held.update(yes=False))

        return Kit("folder", runs, None, hold_folder)
    rows = MemoryRows()

    def hold_row(_run_id: str) -> Holder:
        # The fence callable always says yes: only the rows' own check can refuse.
        token = secrets.token_hex(8)
        return Holder(claim=token, revoke=lambda: rows.revoke(token))

    return Kit("memory", runs, rows, hold_row)


def test_memory_rows_refuse_a_revoked_claim_and_a_sealed_bundle() -> None:
    rows = MemoryRows()
    assert rows.create_bundle("r", "c1") == "ok"
    assert rows.create_bundle("r", "c1") == "exists"
    assert rows.append_events("r", [(1, "{}")], "c1") == "ok"
    assert rows.append_events("r", [(1, "{}")], "c1") == "exists"  # seq taken
    rows.revoke("c1")
    assert rows.append_events("r", [(2, "{}")], "c1") == "fenced"
    assert rows.put_document("r", "state", "{}", "c1") == "fenced"
    assert rows.seal_bundle("r", None) == "ok"
    assert rows.put_document("r", "manifest", "{}", None) == "sealed"
    assert rows.append_events("nope", [(1, "{}")], None) == "missing"
    assert rows.read_events("r") == ["{}"]
