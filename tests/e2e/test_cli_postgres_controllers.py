"""Controllers on two hosts (issue 12): two `wfrun host` processes, each in its own
folder, run the same controller on one Postgres database against the fake GitHub
server. Each key needs several passes (a pass requeues itself until its count is
reached), so passes of one key move between the hosts.

One reconcile per key at a time: a pass reads the pull request's ETag, waits a little,
then edits the title to `pass-<n>` with `If-Match` (n from the resource status, which
the pass's own CAS update advances). Two passes of one key at once would read the same
ETag, so the fake would answer one of them 412, or both would write the same `pass-<n>`.
The fake records every request: each key's edits must be pass-1..N in order, none 412.
Effects exactly once: the last pass posts one comment as an effect (no idempotency
token, so a second apply would be a second comment): one comment per key.
"""

from __future__ import annotations

import collections
import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.github_server import FakeGitHub
from pgcluster import PgCluster
from waiting import wait_until

from runner.store.postgres import PostgresStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

KEYS = 16
PASSES = 4
REPO = "octo/widgets"
CONTROLLER = """
    description: Counts passes of one pull request through its ETag, then comments once.
    reconcile: ./tally.py:reconcile
    timeout: 30s
    spec:
      type: object
      additionalProperties: false
      required: [api_base_url, repository, number, passes]
      properties:
        api_base_url: {type: string}
        repository: {type: string}
        number: {type: integer}
        passes: {type: integer, minimum: 1}
    initial_status:
      passes: 0
"""
RECONCILER = '''
import os
import time

import httpx

from runner.controllers import Applied, Condition, Observation


def reconcile(ctx, resource):
    spec = resource.spec
    done = int((resource.status.get("controller_status") or {}).get("passes", 0)) + 1
    path = f"/repos/{spec['repository']}/pulls/{spec['number']}"
    with httpx.Client(base_url=spec["api_base_url"], timeout=10) as http:
        etag = http.get(path).headers["ETag"]
        time.sleep(0.05)  # the window a second pass of this key would fall into
        edit = http.patch(path, json={"title": f"pass-{done}", "pid": os.getpid()},
                          headers={"If-Match": etag})
        state = {"passes": done, "edit": edit.status_code}
        if done < spec["passes"]:
            return ctx.requeue(state, [Condition("Ready", "False", "Counting")])

        def observe(_request):
            return Observation("not_applied")  # never reached without a crash

        def apply(request):
            posted = http.post(f"/repos/{spec['repository']}/issues/{spec['number']}/comments",
                               json={"body": request["body"]})
            if posted.status_code == 201:
                return Applied("applied", str(posted.json()["id"]))
            return Applied("indeterminate", error=f"HTTP {posted.status_code}")

        outcome = ctx.effects.ensure(f"comment:{resource.generation}", "comment",
                                     {"body": f"{resource.key} counted"}, observe, apply)
    return ctx.settled({**state, "comment": outcome.state},
                       [Condition("Ready", "True", "Counted")])
'''


class Hosts:
    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str) -> None:
        folder = self.root / name
        controllers = folder / ".wfrun" / "controllers"
        controllers.mkdir(parents=True)
        (controllers / "tally.yaml").write_text(textwrap.dedent(CONTROLLER))
        (controllers / "tally.py").write_text(RECONCILER)
        with (self.root / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "runner", "--project", str(folder), "--store", self.url,
                 "host", "--quiet"],
                stdout=subprocess.DEVNULL, stderr=log, cwd=folder, start_new_session=True)

    def ready(self) -> bool:
        for name, process in self.procs.items():
            lock = self.root / name / ".wfrun" / "state" / "host.lock"
            assert process.poll() is None, self.logs()
            if not lock.exists() or lock.read_text().strip() != str(process.pid):
                return False
        return True

    def logs(self) -> str:
        return "\n".join(f"{n}: {(self.root / f'{n}.log').read_text(errors='replace')[-600:]}"
                         for n in self.procs)

    def stop(self) -> None:
        for process in self.procs.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.procs.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub().start()
    for number in range(1, KEYS + 1):
        fake.add_pull(REPO, number, f"{number:040x}", checks="success")
    yield fake
    fake.stop()


@pytest.fixture
def hosts(pg_cluster: PgCluster, tmp_path: Path) -> Iterator[Hosts]:
    made = Hosts(tmp_path, pg_cluster.create_schema(f"ctl_{secrets.token_hex(4)}"))
    try:
        yield made
    finally:
        made.stop()


def test_two_hosts_reconcile_each_key_one_pass_at_a_time_and_comment_once(
        hosts: Hosts, github: FakeGitHub) -> None:
    hosts.start("h1")
    hosts.start("h2")
    wait_until(hosts.ready, timeout=60, what=lambda: f"both hosts holding their locks\n"
               f"{hosts.logs()}")  # so both are there when the keys arrive
    with PostgresStore(hosts.url, pool_size=1) as store:
        for number in range(1, KEYS + 1):
            store.resources.apply("tally", f"pr{number}", {
                "api_base_url": github.url, "repository": REPO, "number": number,
                "passes": PASSES}, {"passes": 0})

        def counted() -> bool:
            return all((r.status.get("controller_status") or {}).get("comment") == "applied"
                       for r in store.resources.list("tally")) \
                and len(store.resources.list("tally")) == KEYS

        wait_until(counted, timeout=180, interval=0.1,
                   what=lambda: f"every key counted and commented\n{hosts.logs()}")
        for resource in store.resources.list("tally"):
            assert resource.status["controller_status"]["passes"] == PASSES, resource.key

    edits: dict[str, list[str]] = collections.defaultdict(list)
    pids: set[int] = set()
    for call in github.calls("PATCH"):
        body = call.body if isinstance(call.body, dict) else json.loads(call.body)
        edits[call.path].append(body["title"])
        pids.add(int(body["pid"]))
    refused = [c.path for c in github.calls("PATCH") if c.status == 412]
    assert refused == [], f"overlapping passes of one key: {refused}"
    expected = [f"pass-{n}" for n in range(1, PASSES + 1)]
    assert edits == {f"/repos/{REPO}/pulls/{n}": expected for n in range(1, KEYS + 1)}
    comments = collections.Counter(c["number"] for c in github.comments)
    assert comments == dict.fromkeys(range(1, KEYS + 1), 1)  # each effect once
    host_pids = {p.pid for p in hosts.procs.values()}
    assert pids <= host_pids
    assert pids == host_pids, "both hosts should have reconciled some passes"
