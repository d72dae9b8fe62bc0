"""`runner.host.runtime._errors.translate`: the store's tree classified onto runner.errors.

The busy case comes from a real SQLite lock (another connection mid-transaction),
so it proves the store's own error carries what the classification reads.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.errors import NotFoundError, OperationFailed, TemporaryError, WfrunError
from runner.host.runtime._errors import BUSY_MESSAGE, translate
from runner.store import SqliteStore
from runner.store import _faults as faults
from runner.store._errors import (
    RESET_INSTRUCTION,
    IdentityConflict,
    IncompatibleLayout,
    SqliteTooOld,
    StoreBusy,
    StoreError,
    StoreUnavailable,
    is_busy,
)


@pytest.fixture
def locked_store(tmp_path: Path) -> Iterator[SqliteStore]:
    """A store whose file another connection holds with BEGIN IMMEDIATE."""
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path, busy_timeout_ms=50)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield store
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        store.close()


def test_a_write_on_a_locked_store_is_a_temporary_busy_error(
        locked_store: SqliteStore) -> None:
    with pytest.raises(StoreError) as caught:
        locked_store.reconcile_queue.enqueue("ctl", "key")
    assert is_busy(caught.value)
    error = translate(caught.value)
    assert isinstance(error, TemporaryError)
    assert error.message == BUSY_MESSAGE
    assert error.exit_code == 1
    assert error.__cause__ is caught.value  # --debug still shows where the store failed


@pytest.mark.parametrize(("raised", "kind", "message"), [
    (StoreBusy(), TemporaryError, BUSY_MESSAGE),
    (StoreUnavailable("cannot read the store at s: Permission denied"), TemporaryError,
     "cannot read the store at s: Permission denied"),
    (SqliteTooOld(), OperationFailed, SqliteTooOld().message),  # waiting will not help
    (IncompatibleLayout("s", "table x is missing"), OperationFailed,
     f"incompatible store layout at s: table x is missing. {RESET_INSTRUCTION}"),
    (IdentityConflict("request id r belongs to another request"), OperationFailed,
     "request id r belongs to another request"),
    (StoreError("store error in s: disk I/O error"), OperationFailed,
     "store error in s: disk I/O error"),
    # Machine faults: each says what to do, none advises a reset (issue 10).
    (faults.disk_full(Path("s")), TemporaryError, faults.disk_full(Path("s")).message),
    (faults.read_only(Path("s")), OperationFailed, faults.read_only(Path("s")).message),
    (faults.no_permission(Path("s"), "denied"), OperationFailed,
     faults.no_permission(Path("s"), "denied").message),
    (faults.corrupt(Path("s"), "database disk image is malformed"), OperationFailed,
     faults.corrupt(Path("s"), "database disk image is malformed").message),
])
def test_store_errors_are_classified_by_what_the_caller_should_do(
        raised: StoreError, kind: type[WfrunError], message: str) -> None:
    error = translate(raised)
    assert type(error) is kind
    assert error is not None
    assert error.message == message
    assert error.exit_code == 1  # DESIGN §9: the store never means bad input or not found
    if not isinstance(raised, IncompatibleLayout):
        assert "store reset" not in error.message  # only a real layout mismatch


def _cannot_open(path: Path) -> None:
    try:
        sqlite3.connect(path).execute("SELECT 1")
    except sqlite3.OperationalError:  # SQLITE_CANTOPEN, translated as the store does
        raise StoreUnavailable("cannot open the store at s") from None


def test_an_unavailable_store_without_a_lock_is_not_called_busy(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable) as caught:
        _cannot_open(tmp_path / "missing" / "store.sqlite3")
    assert caught.value.__context__ is not None  # the sqlite3 error is there to read
    assert not is_busy(caught.value)
    error = translate(caught.value)
    assert isinstance(error, TemporaryError)
    assert error.message == "cannot open the store at s"


def test_wfrun_errors_pass_through_and_other_exceptions_are_left_alone() -> None:
    mine = NotFoundError("no run 'x'")
    assert translate(mine) is mine
    assert translate(ValueError("a bug")) is None
    assert translate(KeyError("a bug")) is None
