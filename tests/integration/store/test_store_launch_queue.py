"""Conformance: enqueue, reads, session reservations and continuation slots."""

from __future__ import annotations

import json
import random

import pytest
from storekit import SECRET, FakeClock, launch

from runner.store import LaunchRecord, LostRace, Store


def _claim(store: Store, run_id: str) -> LaunchRecord:
    claimed = store.launches.claim(run_id, runner_id="host-1")
    assert isinstance(claimed, LaunchRecord), claimed
    return claimed


def test_enqueue_stores_a_queued_launch_with_identity_and_private_input(
    store: Store, clock: FakeClock
) -> None:
    new = launch(
        "run-1",
        workflow_path="/p/.wfrun/workflows/review.yaml",
        origin_session_id="session-a",
        affinity_runner_id="host-1",
    )
    record = store.launches.enqueue(new)
    assert isinstance(record, LaunchRecord)
    assert record.status == "queued"
    assert record.source == dict(new.source)
    assert record.definition_digest == new.definition_digest
    assert record.input() == {"task": "fix the bug", "token": SECRET}
    assert record.options() == {"executor": "scripted"}
    assert record.origin_session_id == "session-a"
    assert record.affinity_runner_id == "host-1"
    assert record.workflow_path == "/p/.wfrun/workflows/review.yaml"
    assert (record.claim_token, record.claim_expires_at, record.epoch) == (None, None, 0)
    assert record.created_at == record.updated_at == int(clock.now() * 1000)
    assert record.started_at is None
    assert record.finished_at is None
    assert store.launches.get("run-1") == record
    assert store.launches.get("missing") is None
    events = store.run_events.read(run_id="run-1")
    assert [(e.type, e.payload["to"]) for e in events] == [("launch.queued", "queued")]
    assert SECRET not in repr([e.payload for e in events])


def test_input_is_canonical_json(store: Store) -> None:
    record = store.launches.enqueue(launch("run-1", input={"b": 1, "a": [1.5, "é"]}))
    assert isinstance(record, LaunchRecord)
    assert record.input_json == '{"a":[1.5,"é"],"b":1}'


def test_a_scalar_input_round_trips(store: Store) -> None:
    record = store.launches.enqueue(launch("run-1", input=None))
    assert isinstance(record, LaunchRecord)
    assert record.input() is None
    assert not record.input_cleared


@pytest.mark.parametrize(
    "bad",
    [
        {"input": {"x": float("nan")}},  # not finite
        {"input": {"x": object()}},  # not JSON
        {"source": ["not", "an", "object"]},
        {"run_id": ""},
        {"run_id": "two\nlines"},
        {"input": {"blob": "x" * (1024 * 1024 + 1)}},  # over the 1 MiB bound
    ],
)
def test_enqueue_refuses_invalid_values_and_stores_nothing(
    store: Store, bad: dict[str, object]
) -> None:
    fields: dict[str, object] = {"run_id": "run-1", **bad}
    new = launch(**fields)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"."):
        store.launches.enqueue(new)
    assert store.launches.query() == []


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"run_id": "two\nlines"}, "run_id must be 1-512 printable characters"),
        ({"workflow_ref": ""}, "workflow_ref must be 1-512 printable characters"),
        ({"definition_digest": "d" * 513}, "definition_digest must be 1-512"),
        ({"origin_session_id": ""}, "origin_session_id must be 1-512"),
        ({"parent_run_id": 7}, "parent_run_id must be 1-512"),
        ({"affinity_runner_id": "tab\there"}, "affinity_runner_id must be 1-512"),
        ({"source": ["a", "list"]}, "source identity must be a JSON object"),
        ({"source": {"at": {1, 2}}}, "source identity is not plain JSON"),
        ({"input": float("inf")}, "launch input is not plain JSON"),
        ({"input": "x" * (1024 * 1024)}, "launch input is 1048578 bytes of JSON; the limit"),
        ({"options": "fast"}, "launch options must be a JSON object"),
        ({"options": {"big": "é" * (512 * 1024)}}, "launch options is 1048586 bytes"),
    ],
)
def test_enqueue_names_each_refused_value(store: Store, bad: dict[str, object],
                                          message: str) -> None:
    """The enqueue checks its ids and JSON columns inline (each enqueue is on the run
    path) and refuses in the words of `check_id` / `json_object` / `canonical_json`."""
    new = launch(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        store.launches.enqueue(new)
    assert store.launches.query() == []


def test_enqueue_takes_values_at_their_bounds(store: Store) -> None:
    run_id = "r" * 512
    given = "x" * (1024 * 1024 - 2)  # with its quotes, exactly the 1 MiB bound
    record = store.launches.enqueue(launch(run_id, input=given, options=None,
                                           origin_session_id="s é"))
    assert isinstance(record, LaunchRecord)
    assert (record.run_id, record.input(), record.options()) == (run_id, given, None)


def test_claim_next_checks_its_claimer_at_every_claim(store: Store, clock: FakeClock) -> None:
    """A claimer's id and lease are checked once and remembered (a host asks with the
    same ones every claim): a refused one is refused again, and each lease length
    claims with its own."""
    for _ in range(2):
        with pytest.raises(ValueError, match="runner_id must be 1-512"):
            store.launches.claim_next(runner_id="")
        with pytest.raises(ValueError, match="a lease must be positive"):
            store.launches.claim_next(runner_id="host-1", lease_seconds=0)
    for n, lease in enumerate((30, 5, 30)):
        store.launches.enqueue(launch(f"run-{n}"))
        record = store.launches.claim_next(runner_id="host-1", lease_seconds=lease)
        assert record is not None
        assert record.run_id == f"run-{n}"
        assert record.claim_expires_at == int(clock.now() * 1000) + lease * 1000


def test_enqueue_of_a_taken_run_id_loses_and_keeps_the_first(store: Store) -> None:
    first = store.launches.enqueue(launch("run-1", input={"n": 1}))
    lost = store.launches.enqueue(launch("run-1", input={"n": 2}))
    assert lost == LostRace("run-1", "already_exists", "queued")
    assert store.launches.get("run-1") == first


def test_one_reservation_per_origin_session(store: Store) -> None:
    first = store.launches.enqueue(launch("run-1", origin_session_id="session-a"))
    assert isinstance(first, LaunchRecord)
    lost = store.launches.enqueue(launch("run-2", origin_session_id="session-a"))
    assert lost == LostRace("run-2", "session_reserved", "queued", "run-1")
    assert store.launches.get("run-2") is None
    # Another session and detached launches are independent.
    assert isinstance(
        store.launches.enqueue(launch("run-3", origin_session_id="session-b")), LaunchRecord
    )
    assert isinstance(store.launches.enqueue(launch("run-4")), LaunchRecord)
    assert isinstance(store.launches.enqueue(launch("run-5")), LaunchRecord)
    reservation = store.launches.find_session_reservation("session-a")
    assert reservation is not None
    assert reservation.run_id == "run-1"
    assert store.launches.find_session_reservation("session-z") is None


@pytest.mark.parametrize("status", ["starting", "running"])
def test_starting_and_running_launches_keep_the_reservation(store: Store, status: str) -> None:
    store.launches.enqueue(launch("run-1", origin_session_id="session-a"))
    claimed = _claim(store, "run-1")
    if status == "running":
        assert isinstance(
            store.launches.mark_running("run-1", claimed.claim_token or ""), LaunchRecord
        )
    lost = store.launches.enqueue(launch("run-2", origin_session_id="session-a"))
    assert isinstance(lost, LostRace)
    assert lost.reason == "session_reserved"
    assert lost.status == status
    assert lost.holder == "run-1"


@pytest.mark.parametrize("ending", ["failed", "cancelled", "done", "parked"])
def test_leaving_the_active_states_releases_the_reservation(store: Store, ending: str) -> None:
    store.launches.enqueue(launch("run-1", origin_session_id="session-a"))
    token = _claim(store, "run-1").claim_token or ""
    launches = store.launches
    if ending == "failed":
        result = launches.fail("run-1", token, code="source_changed", message="source changed")
    elif ending == "cancelled":
        result = launches.cancel("run-1", claim_token=token)  # its holder: lease live
    else:
        assert isinstance(launches.mark_running("run-1", token), LaunchRecord)
        result = (
            launches.finish("run-1", token) if ending == "done" else launches.park("run-1", token)
        )
    assert isinstance(result, LaunchRecord)
    assert result.status == ending
    assert store.launches.find_session_reservation("session-a") is None
    second = store.launches.enqueue(launch("run-2", origin_session_id="session-a"))
    assert isinstance(second, LaunchRecord)
    assert second.status == "queued"


def test_a_parked_launch_cannot_resume_while_its_session_is_reserved(store: Store) -> None:
    store.launches.enqueue(launch("run-1", origin_session_id="session-a"))
    token = _claim(store, "run-1").claim_token or ""
    store.launches.mark_running("run-1", token)
    store.launches.park("run-1", token)
    store.launches.enqueue(launch("run-2", origin_session_id="session-a"))
    lost = store.launches.claim("run-1", runner_id="host-1")
    assert lost == LostRace("run-1", "session_reserved", "parked", "run-2")
    # claim_next skips it and takes the reserving launch instead.
    nxt = store.launches.claim_next(runner_id="host-1", session_id="session-a")
    assert nxt is not None
    assert nxt.run_id == "run-2"
    parked = store.launches.get("run-1")
    assert parked is not None
    assert parked.status == "parked"


def test_one_continuation_per_parent(store: Store) -> None:
    first = store.launches.enqueue(launch("child-1", parent_run_id="parent"))
    assert isinstance(first, LaunchRecord)
    lost = store.launches.enqueue(launch("child-2", parent_run_id="parent"))
    assert lost == LostRace("child-2", "continuation_exists", "queued", "child-1")
    found = store.launches.find_continuation("parent")
    assert found is not None
    assert found.run_id == "child-1"
    assert isinstance(
        store.launches.enqueue(launch("child-3", parent_run_id="other")), LaunchRecord
    )


def test_a_continuation_that_failed_to_start_frees_the_slot(store: Store) -> None:
    store.launches.enqueue(launch("child-1", parent_run_id="parent"))
    token = _claim(store, "child-1").claim_token or ""
    store.launches.fail("child-1", token, code="input_invalid", message="answer is not valid")
    assert store.launches.find_continuation("parent") is None
    second = store.launches.enqueue(launch("child-2", parent_run_id="parent"))
    assert isinstance(second, LaunchRecord)


def test_a_continuation_that_started_keeps_the_slot_even_after_it_ends(store: Store) -> None:
    store.launches.enqueue(launch("child-1", parent_run_id="parent"))
    token = _claim(store, "child-1").claim_token or ""
    store.launches.mark_running("child-1", token)
    store.launches.cancel("child-1", claim_token=token)
    lost = store.launches.enqueue(launch("child-2", parent_run_id="parent"))
    assert lost == LostRace("child-2", "continuation_exists", "cancelled", "child-1")


def test_a_launch_cannot_continue_itself(store: Store) -> None:
    with pytest.raises(ValueError, match="continue itself"):
        store.launches.enqueue(launch("run-1", parent_run_id="run-1"))
    assert store.launches.get("run-1") is None


def test_query_filters_by_status_and_session_oldest_first(store: Store, clock: FakeClock) -> None:
    for i, session in enumerate(["session-a", "session-b", None]):
        clock.advance(1)
        store.launches.enqueue(launch(f"run-{i}", origin_session_id=session))
    _claim(store, "run-1")
    assert [r.run_id for r in store.launches.query()] == ["run-0", "run-1", "run-2"]
    assert [r.run_id for r in store.launches.query(statuses=["starting"])] == ["run-1"]
    assert [
        r.run_id for r in store.launches.query(statuses=["queued"], session_id="session-a")
    ] == ["run-0"]
    assert store.launches.query(statuses=[]) == []
    assert [r.run_id for r in store.launches.query(limit=1)] == ["run-0"]
    with pytest.raises(ValueError, match="unknown launch status"):
        store.launches.query(statuses=["claimed"])  # type: ignore[list-item]


def test_page_filters_by_run_id_prefix_and_last_change_newest_first(
        store: Store, clock: FakeClock) -> None:
    # `wfrun runs --workflow quick` pages on the run-id prefix `quick-`; `--since` on
    # the row's last change (issue 15).
    for run_id in ("quick-1", "quick-two-1", "quicker-1", "quick-2", "other-1"):
        clock.advance(1)
        store.launches.enqueue(launch(run_id))
    cut = int(clock.now() * 1000)
    clock.advance(1)
    _claim(store, "quick-1")  # changed after the cut
    page = store.launches.page(run_id_prefix="quick-")
    assert [r.run_id for r in page] == ["quick-2", "quick-two-1", "quick-1"]
    assert [r.run_id for r in store.launches.page(run_id_prefix="quick-", limit=1,
                                                  offset=1)] == ["quick-two-1"]
    assert [r.run_id for r in store.launches.page(updated_since=cut)] == ["other-1",
                                                                          "quick-1"]
    assert [r.run_id for r in store.launches.page(updated_since=cut + 1)] == ["quick-1"]
    assert [r.run_id for r in store.launches.page(
        statuses=["queued"], run_id_prefix="quick-", newest_first=False)] == [
        "quick-two-1", "quick-2"]


def test_a_done_row_keeps_how_its_run_ended_and_pages_by_it(
    store: Store, clock: FakeClock
) -> None:
    for run_id in ("run-done", "run-wait", "run-fail", "run-live"):
        assert isinstance(store.launches.enqueue(launch(run_id)), LaunchRecord)
    def running(run_id: str) -> str:
        token = _claim(store, run_id).claim_token
        assert token is not None
        assert isinstance(store.launches.mark_running(run_id, token), LaunchRecord)
        return token

    done = store.launches.finish("run-done", running("run-done"))
    waiting = store.launches.finish("run-wait", running("run-wait"), waiting=True)
    failed = store.launches.fail("run-fail", running("run-fail"), code="activation_failed",
                                 message="no bundle")
    live = _claim(store, "run-live")
    assert isinstance(done, LaunchRecord)
    assert isinstance(waiting, LaunchRecord)
    assert isinstance(failed, LaunchRecord)
    assert (done.ending, waiting.ending, failed.ending) == ("completed", "waiting", None)
    assert live.ending is None
    assert store.launches.get("run-wait") == waiting

    def ids(**where: object) -> set[str]:
        return {r.run_id for r in store.launches.page(**where)}  # type: ignore[arg-type]

    # Only done rows are filtered by their ending; other statuses pass.
    assert ids(ending="waiting") == {"run-wait", "run-fail", "run-live"}
    assert ids(statuses=["done", "starting"], ending="completed") == {"run-done", "run-live"}
    assert ids(statuses=["done"]) == {"run-done", "run-wait"}
    with pytest.raises(ValueError, match="ending"):
        store.launches.page(ending="continued")  # type: ignore[arg-type]


def test_a_page_by_status_is_the_sorted_filtered_rows_whatever_the_mix(
    store: Store, clock: FakeClock
) -> None:
    """The status-only page merges one index range per status (per ending for `done`);
    it must give exactly the rows a sort of every matching row gives, at every offset."""
    rng = random.Random(15)
    for i in range(60):
        run_id = f"run-{i:03d}"
        store.launches.enqueue(launch(run_id))
        clock.advance(rng.choice([0, 0.001, 1]))  # ties on created_at too
        fate = rng.choice(["queued", "starting", "running", "parked", "done", "waiting",
                           "failed", "cancelled"])
        if fate == "queued":
            continue
        if fate == "cancelled":
            store.launches.cancel(run_id)
            continue
        token = _claim(store, run_id).claim_token or ""
        if fate == "starting":
            continue
        if fate == "failed":
            store.launches.fail(run_id, token, code="run_failed", message="x")
            continue
        store.launches.mark_running(run_id, token)
        if fate == "parked":
            store.launches.park(run_id, token)
        elif fate in ("done", "waiting"):
            store.launches.finish(run_id, token, waiting=fate == "waiting")
    every = sorted(store.launches.query(), key=lambda r: (r.created_at, r.run_id),
                   reverse=True)
    assert len(every) == 60
    filters: list[tuple[tuple[str, ...] | None, str | None]] = [
        (None, None), (("done",), None), (("done",), "waiting"), (("done",), "completed"),
        (("starting", "running", "parked", "failed"), None),
        (("queued", "done", "cancelled"), "completed"), (("failed", "cancelled"), None)]
    for statuses, ending in filters:
        expected = [r.run_id for r in every
                    if (statuses is None or r.status in statuses)
                    and (ending is None or r.status != "done" or r.ending == ending)]
        for limit, offset in ((50, 0), (7, 0), (7, 7), (5, 20), (3, 100)):
            got = store.launches.page(statuses=statuses, ending=ending,  # type: ignore[arg-type]
                                      limit=limit, offset=offset)
            assert [r.run_id for r in got] == expected[offset:offset + limit], \
                (statuses, ending, limit, offset)
        oldest = store.launches.page(statuses=statuses, ending=ending,  # type: ignore[arg-type]
                                     newest_first=False, limit=4)
        assert [r.run_id for r in oldest] == expected[::-1][:4]


def test_a_launch_claimed_as_it_is_queued_is_never_claimable_by_another(
    store: Store, clock: FakeClock
) -> None:
    """A foreground run's launch: queued and claimed by its affinity runner in one
    commit, so an idle host's claim finds nothing (issue 35)."""
    record = store.launches.enqueue(launch("run-1", affinity_runner_id="fg-1"),
                                    claim_by="fg-1", lease_seconds=30.0)
    assert isinstance(record, LaunchRecord)
    assert (record.status, record.runner_id, record.epoch) == ("starting", "fg-1", 1)
    assert record.claim_expires_at == int(clock.now() * 1000) + 30_000
    assert record.input() == {"task": "fix the bug", "token": SECRET}  # activation needs it
    assert store.launches.claim_next(runner_id="idle-host") is None
    lost = store.launches.claim("run-1", runner_id="idle-host")
    assert isinstance(lost, LostRace)
    assert lost.reason == "lease_active"
    events = store.run_events.read(run_id="run-1")
    assert [e.type for e in events] == ["launch.queued", "launch.starting"]
    clock.advance(31)  # its runner died: the lease lapsed, a host may take it over
    taken = store.launches.claim_next(runner_id="idle-host")
    assert taken is not None
    assert taken.run_id == "run-1"
    with pytest.raises(ValueError, match="claim_by"):
        store.launches.enqueue(launch("run-2"), claim_by="")


def test_queued_sources_groups_the_detached_queue_by_source(store: Store,
                                                            clock: FakeClock) -> None:
    one, two = {"source": {"path": "/p/a.yaml"}}, {"source": {"path": "/p/b.yaml"}}
    for i in range(3):
        store.launches.enqueue(launch(f"a-{i}", source=one))
        clock.advance(1)
    store.launches.enqueue(launch("b-0", source=two))
    store.launches.enqueue(launch("s-0", source=two, origin_session_id="session-a"))
    _claim(store, "a-0")  # no longer queued
    groups = store.launches.queued_sources()
    assert [(g.launches, g.first_run_id) for g in groups] == [(2, "a-1"), (1, "b-0")]
    assert [json.loads(g.source_json) for g in groups] == [one, two]
    assert store.launches.queued_sources(limit=1)[0].first_run_id == "a-1"
