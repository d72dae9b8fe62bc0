"""Webhook group commit (issue 38): deliveries that arrive while a commit is under
way are queued together in the next one, each still answered with its own run;
and a delivery answered 2xx is in the queue after the host is SIGKILLed right
after the answers, once (a real `wfrun host --listen` process, real clients)."""

from __future__ import annotations

import signal
import threading
from collections import Counter
from pathlib import Path

import httpx
from standalonekit import Project
from test_webhooks import HOOKED, SECRET, Served, post
from waiting import wait_until

from runner.store import SqliteStore


def test_deliveries_arriving_during_a_commit_share_the_next_one(tmp_path: Path) -> None:
    project = Project(tmp_path / "proj")
    project.workflow("hooked", HOOKED)
    served = Served(project.root)
    answers: dict[str, httpx.Response] = {}

    def deliver(delivery: str) -> None:
        with httpx.Client(timeout=60) as client:
            answers[delivery] = post(client, served.url, delivery, {"ref": delivery})

    try:
        db = served.store._db  # type: ignore[attr-defined]
        commits = served.server.commits
        with db._write_lock:  # the first delivery's commit waits for the store
            first = threading.Thread(target=deliver, args=("d-0",))
            first.start()
            wait_until(lambda: commits.running == 1, what="the first delivery's commit")
            rest = [threading.Thread(target=deliver, args=(f"d-{n}",)) for n in (1, 2, 3, 4)]
            for t in rest:
                t.start()
            wait_until(lambda: len(commits._pending) == 4, what="four deliveries waiting")
            rounds = commits.rounds
        for t in [first, *rest]:
            t.join(60)
        assert commits.rounds - rounds == 2  # d-0 alone, then d-1..d-4 in one commit
        assert {d: a.status_code for d, a in answers.items()} == {
            f"d-{n}": 202 for n in range(5)}
        runs = {d: a.json()["run_id"] for d, a in answers.items()}
        assert len(set(runs.values())) == 5
        for delivery, run_id in runs.items():
            record = served.store.launches.get(run_id)
            assert record is not None
            assert record.input() == {"ref": delivery, "delivery": delivery}
    finally:
        served.close()


def _launches_by_delivery(store: SqliteStore) -> dict[str, str]:
    """Delivery -> its run, for every delivery with a queued run; and every queued
    run is one delivery's (a run's input is cleared once it ends: the firing
    names the run)."""
    firings = store.triggers.firings("hooked", "push", limit=100_000)
    runs = {f.key.removeprefix("delivery:"): f.run_id for f in firings
            if f.run_id is not None and store.launches.get(f.run_id) is not None}
    queued = [r.run_id for r in store.launches.query(limit=100_000)]
    assert Counter(queued) == Counter(runs.values())  # one run per delivery, no other
    return {d: r for d, r in runs.items() if r is not None}


def test_every_delivery_answered_before_a_sigkill_is_queued_once(project: Project) -> None:
    project.workflow("hooked", HOOKED.replace('shell: [echo, "{{ input.ref }}"]',
                                              'shell: [true]'))
    host = project.host("--listen", "127.0.0.1:0", PUSH_SECRET=SECRET)
    project.wait_host_ready(host)
    url = project.webhooks_url(host, "/hooks/push")
    answered: dict[str, str] = {}  # delivery -> run id, for every 2xx answer
    sent: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(n: int) -> None:
        with httpx.Client(timeout=30) as http:
            for i in range(10_000):
                delivery = f"c{n}-{i}"
                with lock:
                    sent.append(delivery)
                try:
                    answer = post(http, url, delivery, {"ref": delivery})
                except httpx.HTTPError:  # the host is gone
                    return
                if answer.is_success:
                    with lock:
                        answered[delivery] = answer.json()["run_id"]
                if stop.is_set():
                    return

    clients = [threading.Thread(target=client, args=(n,)) for n in range(6)]
    for t in clients:
        t.start()
    wait_until(lambda: len(answered) >= 60, what="60 answered deliveries")
    host.send_signal(signal.SIGKILL)  # mid-storm: some deliveries are in flight
    stop.set()
    host.wait(timeout=30)
    for t in clients:
        t.join(60)
    store = SqliteStore(project.root / ".wfrun" / "state" / "store.sqlite3")
    try:
        queued = _launches_by_delivery(store)
        assert {d: queued.get(d) for d in answered} == answered
    finally:
        store.close()

    # Every sender retries what it had no answer for: a new host answers each
    # answered one as a replay of its run, and queues each other one once.
    again = project.host("--listen", "127.0.0.1:0", PUSH_SECRET=SECRET)
    project.wait_host_ready(again)
    url = project.webhooks_url(again, "/hooks/push")
    with httpx.Client(timeout=30) as http:
        for delivery in sent:
            answer = post(http, url, delivery, {"ref": delivery})
            assert answer.is_success, answer.text
            if delivery in answered:
                assert answer.json()["run_id"] == answered[delivery]
                assert answer.json()["replayed"] is True
    store = SqliteStore(project.root / ".wfrun" / "state" / "store.sqlite3")
    try:
        queued = _launches_by_delivery(store)
        assert set(queued) == set(sent)
        assert {d: queued[d] for d in answered} == answered
    finally:
        store.close()
