"""Conformance: `ControllerStore.resources` (spec/status, generations, CAS, deletion)."""

from __future__ import annotations

import pytest
from storekit import FakeClock

from runner.store import LostRace
from runner.store._controller_interface import (
    SPEC_MAX_BYTES,
    STATUS_MAX_BYTES,
    ControllerStore,
    Resource,
)

C = "pull-request"


def _ok(result: Resource | LostRace) -> Resource:
    assert isinstance(result, Resource), result
    return result


def test_apply_creates_version_1_generation_1_and_enqueues(
    cstore: ControllerStore, clock: FakeClock
) -> None:
    created = cstore.resources.apply(C, "pr-1", {"number": 1}, {"phase": "observing"})
    assert (created.resource_version, created.generation) == (1, 1)
    assert created.spec == {"number": 1}
    assert created.status == {"phase": "observing"}
    assert created.deletion_timestamp is None
    assert created.finalizers == ()
    assert created.created_at == created.updated_at == cstore.now_ms()
    assert len(created.uid) == 32
    assert int(created.uid, 16) >= 0
    item = cstore.reconcile_queue.get(C, "pr-1")
    assert item is not None
    assert item.available_at == cstore.now_ms()
    assert cstore.resources.get(C, "pr-1") == created
    assert cstore.resources.get_by_uid(created.uid) == created
    other = cstore.resources.apply(C, "pr-2", {"number": 2})
    assert other.uid != created.uid
    assert other.status == {}


def test_a_spec_change_bumps_generation_the_same_spec_only_the_version(
    cstore: ControllerStore, clock: FakeClock
) -> None:
    first = cstore.resources.apply(C, "pr-1", {"b": 1, "a": [1, 2]}, {"phase": "x"})
    clock.advance(5)
    same = cstore.resources.apply(C, "pr-1", {"a": [1, 2], "b": 1}, {"phase": "ignored"})
    assert (same.resource_version, same.generation) == (2, 1)  # canonical: key order is moot
    assert same.status == {"phase": "x"}  # initial_status applies on creation only
    assert same.uid == first.uid
    assert same.created_at == first.created_at
    assert same.updated_at == first.updated_at + 5000
    changed = cstore.resources.apply(C, "pr-1", {"a": [2, 1], "b": 1})
    assert (changed.resource_version, changed.generation) == (3, 2)
    assert changed.spec == {"a": [2, 1], "b": 1}


def test_a_status_update_never_bumps_generation(cstore: ControllerStore) -> None:
    r = cstore.resources.apply(C, "pr-1", {"n": 1})
    updated = _ok(cstore.resources.update_status(C, "pr-1", r.resource_version, {"ready": True}))
    assert updated.status == {"ready": True}
    assert (updated.resource_version, updated.generation) == (2, 1)
    again = _ok(cstore.resources.update_status(C, "pr-1", 2, {"ready": False}))
    assert (again.resource_version, again.generation) == (3, 1)
    assert again.spec == {"n": 1}


def test_an_identical_status_write_is_skipped(cstore: ControllerStore) -> None:
    r = cstore.resources.apply(C, "pr-1", {"n": 1}, {"ready": True})
    same = _ok(cstore.resources.update_status(C, "pr-1", 1, {"ready": True}))
    assert same == r
    assert cstore.resources.update_status(C, "pr-1", 0, {"ready": True}) == LostRace(
        f"{C}/pr-1", "version_mismatch"
    )


def test_a_stale_version_cannot_overwrite_newer_status(cstore: ControllerStore) -> None:
    read = cstore.resources.apply(C, "pr-1", {"n": 1})
    newer = _ok(cstore.resources.update_status(C, "pr-1", read.resource_version, {"v": "new"}))
    stale = cstore.resources.update_status(C, "pr-1", read.resource_version, {"v": "stale"})
    assert stale == LostRace(f"{C}/pr-1", "version_mismatch")
    assert cstore.resources.get(C, "pr-1") == newer
    # A spec change between read and write also invalidates the reader's version.
    cstore.resources.apply(C, "pr-1", {"n": 2})
    lost = cstore.resources.update_status(C, "pr-1", newer.resource_version, {"v": "late"})
    assert isinstance(lost, LostRace)
    assert lost.reason == "version_mismatch"
    missing = cstore.resources.update_status(C, "nope", 1, {})
    assert missing == LostRace(f"{C}/nope", "not_found")


def test_payload_limits(cstore: ControllerStore) -> None:
    # canonical JSON of {"x": "<n chars>"} is n + 8 bytes
    at_limit = {"x": "s" * (SPEC_MAX_BYTES - 8)}
    assert cstore.resources.apply(C, "big", at_limit).spec == at_limit
    with pytest.raises(ValueError, match=r"spec of pull-request/big2 is 262145 bytes.*262144"):
        cstore.resources.apply(C, "big2", {"x": "s" * (SPEC_MAX_BYTES - 7)})
    assert cstore.resources.get(C, "big2") is None
    assert cstore.reconcile_queue.get(C, "big2") is None
    with pytest.raises(ValueError, match=r"initial status .*\(64 KiB\)"):
        cstore.resources.apply(C, "big3", {}, {"x": "s" * STATUS_MAX_BYTES})
    assert cstore.resources.get(C, "big3") is None
    r = cstore.resources.apply(C, "small", {})
    ok = _ok(cstore.resources.update_status(C, "small", 1, {"x": "s" * (STATUS_MAX_BYTES - 8)}))
    with pytest.raises(ValueError, match="status of pull-request/small is 65537 bytes"):
        cstore.resources.update_status(C, "small", 2, {"x": "s" * (STATUS_MAX_BYTES - 7)})
    assert cstore.resources.get(C, "small") == ok
    assert ok.resource_version == r.resource_version + 1


@pytest.mark.parametrize("bad", [["not", "an", "object"], {"x": float("nan")}, {"x": {1, 2}}])
def test_spec_and_status_must_be_json_objects(cstore: ControllerStore, bad: object) -> None:
    with pytest.raises(ValueError, match="JSON"):
        cstore.resources.apply(C, "pr-1", bad)  # type: ignore[arg-type]
    cstore.resources.apply(C, "pr-1", {})
    with pytest.raises(ValueError, match="JSON"):
        cstore.resources.update_status(C, "pr-1", 1, bad)  # type: ignore[arg-type]
    unchanged = cstore.resources.get(C, "pr-1")
    assert unchanged is not None
    assert unchanged.resource_version == 1


def test_finalizers_are_a_cas_write_that_keeps_generation(cstore: ControllerStore) -> None:
    cstore.resources.apply(C, "pr-1", {})
    held = _ok(cstore.resources.set_finalizers(C, "pr-1", 1, ["cleanup", "audit", "cleanup"]))
    assert held.finalizers == ("cleanup", "audit")
    assert (held.resource_version, held.generation) == (2, 1)
    assert cstore.resources.set_finalizers(C, "pr-1", 1, []) == LostRace(
        f"{C}/pr-1", "version_mismatch"
    )
    with pytest.raises(ValueError, match="one string"):
        cstore.resources.set_finalizers(C, "pr-1", 2, "cleanup")
    assert cstore.resources.get(C, "pr-1") == held


def test_deletion_waits_for_the_request_and_the_finalizers(
    cstore: ControllerStore, clock: FakeClock
) -> None:
    r = cstore.resources.apply(C, "pr-1", {})
    r = _ok(cstore.resources.set_finalizers(C, "pr-1", r.resource_version, ["cleanup"]))
    assert cstore.resources.delete(C, "pr-1", r.resource_version) == LostRace(
        f"{C}/pr-1", "not_deleting"
    )
    item = cstore.reconcile_queue.claim_next(runner_id="w", lease_seconds=30)
    assert item is not None
    assert item.claim_token is not None
    cstore.reconcile_queue.complete(C, "pr-1", item.claim_token, outcome="settled")
    assert cstore.reconcile_queue.get(C, "pr-1") is None

    clock.advance(1)
    deleting = cstore.resources.request_deletion(C, "pr-1")
    assert deleting is not None
    assert deleting.deletion_timestamp == cstore.now_ms()
    assert deleting.resource_version == r.resource_version + 1
    assert deleting.generation == 1
    assert cstore.reconcile_queue.get(C, "pr-1") is not None  # woken to clean up
    clock.advance(1)
    again = cstore.resources.request_deletion(C, "pr-1")
    assert again == deleting  # the timestamp is set once; no extra write
    assert cstore.resources.delete(C, "pr-1", deleting.resource_version) == LostRace(
        f"{C}/pr-1", "finalizers_pending"
    )
    assert cstore.resources.delete(C, "pr-1", 1) == LostRace(f"{C}/pr-1", "version_mismatch")
    cleared = _ok(cstore.resources.set_finalizers(C, "pr-1", deleting.resource_version, []))
    assert cleared.deletion_timestamp == deleting.deletion_timestamp
    assert cstore.resources.delete(C, "pr-1", cleared.resource_version) is True
    assert cstore.resources.get(C, "pr-1") is None
    assert cstore.resources.get_by_uid(r.uid) is None
    assert cstore.reconcile_queue.get(C, "pr-1") is None  # the queue row went with it
    assert cstore.resources.delete(C, "pr-1", cleared.resource_version) is False
    assert cstore.resources.request_deletion(C, "pr-1") is None
    reborn = cstore.resources.apply(C, "pr-1", {})
    assert reborn.uid != r.uid
    assert (reborn.resource_version, reborn.generation) == (1, 1)


def test_list_by_controller_in_key_order(cstore: ControllerStore) -> None:
    for key in ("b", "a", "c"):
        cstore.resources.apply(C, key, {"k": key})
    cstore.resources.apply("other", "a", {})
    assert [r.key for r in cstore.resources.list(C)] == ["a", "b", "c"]
    assert [(r.controller, r.key) for r in cstore.resources.list()] == [
        ("other", "a"),
        (C, "a"),
        (C, "b"),
        (C, "c"),
    ]
    assert cstore.resources.list("none") == []


@pytest.mark.parametrize(("controller", "key"), [("", "k"), (C, ""), (C, "a\nb"), (C, "x" * 513)])
def test_ids_are_checked_before_anything_is_written(
    cstore: ControllerStore, controller: str, key: str
) -> None:
    with pytest.raises(ValueError, match="printable"):
        cstore.resources.apply(controller, key, {})
    assert cstore.resources.list() == []
    assert cstore.reconcile_queue.list() == []
