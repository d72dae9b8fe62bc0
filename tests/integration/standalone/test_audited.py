"""`audited` (runtime/_audit.py): an action's row after it, done or refused, and a
store that refuses the row never hides the action's own answer or error. A real
SQLite store, opened read-only for the refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import InputError
from runner.host.runtime._audit import Actor, Done, audited
from runner.store import SqliteStore

ME = Actor("user:tester", "cli")


def test_done_and_refused_actions_leave_one_row_each(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "store.sqlite3") as store:
        assert audited(store, ME, "cancel", run_id="r1", workflow=None, detail={},
                       do=lambda: "cancelled", done=lambda _: Done(workflow="wf")) == "cancelled"

        def refuse() -> str:
            raise InputError("run 'r2' has ended; nothing to cancel")

        with pytest.raises(InputError, match="has ended"):
            audited(store, ME, "cancel", run_id="r2", workflow=None, detail={"x": 1}, do=refuse)
        rows = [(e.action, e.outcome, e.run_id, e.workflow_ref, e.origin, e.detail)
                for e in store.audit.newest()][::-1]
    assert rows == [
        ("cancel", "ok", "r1", "wf", "cli", {}),
        ("cancel", "failed", "r2", None, "cli",
         {"x": 1, "error": "run 'r2' has ended; nothing to cancel"})]


def test_a_store_that_refuses_the_row_keeps_the_actions_answer_and_error(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    SqliteStore(tmp_path / "store.sqlite3").close()
    with SqliteStore(tmp_path / "store.sqlite3", read_only=True) as store:
        assert audited(store, ME, "pause", run_id="r1", workflow=None, detail={},
                       do=lambda: "paused") == "paused"

        def refuse() -> str:
            raise InputError("no run 'r9'")

        with pytest.raises(InputError, match="no run 'r9'"):
            audited(store, ME, "pause", run_id="r9", workflow=None, detail={}, do=refuse)
        assert store.audit.newest() == []
    warned = [r.getMessage() for r in caplog.records if r.name == "wfrun.audit"]
    assert len(warned) == 2
    assert all(w.startswith("wfrun: the audit row of this pause was not written: ")
               for w in warned)
