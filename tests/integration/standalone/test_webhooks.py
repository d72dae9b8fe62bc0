"""Webhook ingress (DESIGN §10) with real HTTP clients against the real server on
127.0.0.1: signed deliveries queue one run each, a replay queues nothing new and
names the first run, a bad signature is 401 and queues nothing, bodies are
bounded; a storm of 1,000 deliveries with 10 % replays from concurrent clients
queues exactly the unique ones."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from standalonekit import Project

from runner.clock import FakeClock
from runner.compiler import build_catalog
from runner.host.runtime._launches import detached_coordinator
from runner.host.runtime._local import Workspace
from runner.host.runtime._triggers import HostTriggers
from runner.host.runtime._webhooks import MAX_BODY, WebhookServer
from runner.store import SqliteStore

SECRET = "s3cret-for-tests"
HOOKED = """\
triggers:
  push:
    webhook: {path: /hooks/push, secret: PUSH_SECRET}
    input: {ref: "{{ event.body.ref }}", delivery: "{{ event.delivery }}"}
input:
  type: object
  properties: {ref: {type: string}, delivery: {type: string}}
start: a
nodes:
  a: {action: {shell: [echo, "{{ input.ref }}"]}}
"""


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def post(client: httpx.Client, url: str, delivery: str, payload: dict[str, Any], *,
         secret: str = SECRET) -> httpx.Response:
    body = json.dumps(payload).encode()
    return client.post(url, content=body, headers={
        "Content-Type": "application/json", "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(body, secret)})


class Served:
    def __init__(self, root: Path) -> None:
        self.store = SqliteStore(root / ".wfrun" / "state" / "store.sqlite3")
        ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun")
        self.triggers = HostTriggers(ws, self.store, detached_coordinator(ws, self.store),
                                     listening=True)
        self.server = WebhookServer("127.0.0.1:0", self.triggers.loop,
                                    self.triggers.current, {"PUSH_SECRET": SECRET})
        self.server.start()
        self.url = f"http://{self.server.address}/hooks/push"

    def queued(self) -> int:
        with self.store._db.write() as conn:  # type: ignore[attr-defined]
            return int(conn.execute("SELECT count(*) FROM workflow_run_queue").fetchone()[0])

    def close(self) -> None:
        self.server.stop()
        self.store.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    project = Project(tmp_path / "proj")
    project.workflow("hooked", HOOKED)
    it = Served(project.root)
    yield it
    it.close()


def test_a_delivery_a_replay_and_bad_signatures(served: Served) -> None:
    with httpx.Client(timeout=30) as client:
        first = post(client, served.url, "d-1", {"ref": "main"})
        assert first.status_code == 202, first.text
        run_id = first.json()["run_id"]
        assert first.json()["outcome"] == "launched"
        again = post(client, served.url, "d-1", {"ref": "main"})
        assert again.status_code == 200
        assert again.json()["run_id"] == run_id
        assert again.json()["replayed"] is True
        record = served.store.launches.get(run_id)
        assert record is not None
        assert record.input() == {"ref": "main", "delivery": "d-1"}

        forged = post(client, served.url, "d-2", {"ref": "evil"}, secret="wrong")
        assert forged.status_code == 401
        body = json.dumps({"ref": "x"}).encode()
        unsigned = client.post(served.url, content=body, headers={"X-GitHub-Delivery": "d-3"})
        assert unsigned.status_code == 401
        tampered = client.post(served.url, content=body + b" ", headers={
            "X-GitHub-Delivery": "d-4", "X-Hub-Signature-256": sign(body)})
        assert tampered.status_code == 401
        big = b"x" * (MAX_BODY + 1)
        assert client.post(served.url, content=big, headers={
            "X-GitHub-Delivery": "d-5", "X-Hub-Signature-256": sign(big)}).status_code == 413
        assert post(client, served.url.replace("push", "pull"), "d-6", {}).status_code == 404
        nameless = client.post(served.url, content=body,
                               headers={"X-Hub-Signature-256": sign(body)})
        assert nameless.status_code == 400
    assert served.queued() == 1  # nothing but the one good delivery
    assert [f.key for f in served.store.triggers.firings("hooked", "push")] == ["delivery:d-1"]


def test_a_storm_of_deliveries_with_replays_queues_each_unique_one_once(
        served: Served) -> None:
    rng = random.Random(7)
    unique = [f"storm-{i}" for i in range(900)]
    deliveries = unique + [rng.choice(unique) for _ in range(100)]  # 10 % replays
    rng.shuffle(deliveries)
    answers: dict[str, set[str]] = {}
    lock = threading.Lock()
    failures: list[str] = []

    def client(share: list[str]) -> None:
        with httpx.Client(timeout=60) as http:
            for delivery in share:
                response = post(http, served.url, delivery, {"ref": delivery})
                if response.status_code not in (200, 202):
                    failures.append(f"{delivery}: {response.status_code} {response.text}")
                    continue
                with lock:
                    answers.setdefault(delivery, set()).add(response.json()["run_id"])
                    assert response.json()["run_id"] is not None

    threads = [threading.Thread(target=client, args=(deliveries[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert len(answers) == 900
    assert all(len(ids) == 1 for ids in answers.values())  # a replay names the first run
    assert served.queued() == 900
    launched = served.store.triggers.firings("hooked", "push", limit=5000,
                                             outcomes=("launched",))
    assert len(launched) == 900


DEBOUNCED = HOOKED.replace("secret: PUSH_SECRET}", "secret: PUSH_SECRET, debounce: 5s}")


def test_a_debounced_webhook_starts_one_run_for_a_burst(tmp_path: Path) -> None:
    """Three deliveries within the debounce window: each is answered at once and kept
    (durably, with its event); once 5 s pass without another, the newest starts the
    one run and the others are recorded as skipped; a replay changes nothing."""
    project = Project(tmp_path / "proj")
    project.workflow("hooked", DEBOUNCED)
    clock = FakeClock()
    root = project.root
    store = SqliteStore(root / ".wfrun" / "state" / "store.sqlite3", clock=clock)
    ws = Workspace(build_catalog("workflows", root, None), root, root / ".wfrun", clock=clock)
    triggers = HostTriggers(ws, store, detached_coordinator(ws, store), listening=True)
    server = WebhookServer("127.0.0.1:0", triggers.loop, triggers.current,
                           {"PUSH_SECRET": SECRET})
    server.start()
    url = f"http://{server.address}/hooks/push"
    try:
        with httpx.Client(timeout=30) as client:
            for n, ref in enumerate(["a", "b", "c"]):
                answer = post(client, url, f"burst-{n}", {"ref": ref})
                assert answer.status_code == 202, answer.text
                assert answer.json()["debounced"] == 5.0
                assert answer.json()["run_id"] is None
                clock.advance(1)
            assert triggers.tick() == pytest.approx(4.0)  # 5 s after the newest
            assert store.launches.query(limit=10) == []
            clock.advance(5)
            triggers.tick()
            (record,) = store.launches.query(limit=10)
            assert record.input() == {"ref": "c", "delivery": "burst-2"}
            replay = post(client, url, "burst-0", {"ref": "a"})
            assert (replay.status_code, replay.json()["outcome"]) == (200, "skipped")
        outcomes = {f.key: (f.outcome, f.event_json)
                    for f in store.triggers.firings("hooked", "push")}
        assert outcomes == {"delivery:burst-0": ("skipped", None),
                            "delivery:burst-1": ("skipped", None),
                            "delivery:burst-2": ("launched", None)}
        triggers.tick()
        assert len(store.launches.query(limit=10)) == 1
    finally:
        server.stop()
        store.close()
