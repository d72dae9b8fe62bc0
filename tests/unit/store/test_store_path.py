"""The path a plain queued run walks through the store (issue 36, "Prove it").

A warm 3-node chain (fixtures/workflows/chain3.yaml) queued, claimed and run the way
`wfrun start` and a host do it (`prepare`, `claim_next`, `execute` on the coordinator
`detached_coordinator` builds), traced with `sys.setprofile`: the store functions it
enters are the queue's transitions, its rows' module, the SQLite transaction and the
writers' turn. No forwarding hop (the launch book hands out the queue's own methods,
the SQLite connector the database's transaction) and no call that does nothing on
SQLite (a notice, a savepoint around a statement SQLite backs out alone).
`bench/bench_path.py --list` prints the whole path.
"""

from __future__ import annotations

import pytest
from runpath import trace_plain_run

#: The store modules a plain run needs: the launch rows (statements, their checks and
#: codec, guard, fence, run events), the queue's transitions, the SQLite connections
#: and transaction, the writers' turn across processes. Not `_records`: its records
#: are plain dataclasses, and the run path checks its ids and JSON inline, decodes its
#: input where it is used, draws a claim token from `secrets` itself and checks a
#: claimer once (`_claimer_lease`).
WALKED = {"domain._launch_queries", "domain._launches", "sqlite._db", "sqlite._writelock"}


@pytest.fixture(scope="module")
def entered(tmp_path_factory: pytest.TempPathFactory) -> set[tuple[str, str]]:
    """(store module, function) of every store function one warm queued run enters."""
    return {(module.removeprefix("runner.store."), function) for module, function
            in trace_plain_run(tmp_path_factory.mktemp("path") / "proj")
            if module.startswith("runner.store.")}


def test_a_plain_run_enters_only_the_store_modules_that_do_its_work(
        entered: set[tuple[str, str]]) -> None:
    modules = {module for module, _ in entered}
    assert modules <= WALKED, sorted(modules - WALKED)
    # The queue's transitions and the SQLite write are on it, so the trace saw them.
    assert ("domain._launches", "LaunchQueue.claim_next") in entered
    assert ("sqlite._db", "SqliteDatabase.transaction") in entered


def test_no_forwarding_hop_between_the_launch_layer_and_the_write(
        entered: set[tuple[str, str]]) -> None:
    # The book's methods are the queue's own; the connector's write is the database's
    # transaction on the store's clock.
    assert {m for m, _ in entered} & {"_book", "sqlite._connector"} == set()


def test_nothing_is_called_on_sqlite_that_does_nothing_there(
        entered: set[tuple[str, str]]) -> None:
    # A detached launch is announced only where the backend has notices (Postgres);
    # a statement a unique index may refuse needs no savepoint on SQLite.
    names = {name for _, name in entered}
    assert "SqliteTransaction.notify" not in names
    assert "SqliteTransaction.savepoint" not in names
