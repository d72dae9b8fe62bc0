"""Flow control through the launch path (DESIGN §10): `concurrency:` and `rate_limit:`
keys rendered from the input when a run is queued, the strategies, and `wfrun why`
naming the key and the runs a waiting run waits for."""

from __future__ import annotations

import itertools
import json

import pytest
from standalonekit import Project, wait_for

from runner.host.runtime._launches import detached_coordinator
from runner.launch._errors import PreflightError

KEYED = """\
concurrency: {{key: "{{{{ input.repo }}}}", limit: 1, strategy: {strategy}}}
rate_limit: {{key: provider, limit: 100, per: 1m}}
input:
  type: object
  properties: {{repo: {{type: string}}}}
start: a
nodes:
  a: {{action: {{shell: [echo, "{{{{ input.repo }}}}"]}}}}
"""


def _hold(project: Project, run_id: str) -> str:
    """Claim `run_id` as a host would (it then holds its key)."""
    store = project.store()
    try:
        record = store.launches.claim_next(runner_id="host-x")
        assert record is not None
        assert record.run_id == run_id
        return record.run_id
    finally:
        store.close()


def test_queue_holds_the_second_run_and_why_names_the_key(project: Project) -> None:
    project.workflow("keyed", KEYED.format(strategy="queue"))
    first, second, other = project.queue("keyed", [{"repo": "a"}, {"repo": "a"},
                                                   {"repo": "b"}])
    _hold(project, first)
    store = project.store()
    try:
        gate = store.launches.gate(second)
        assert gate is not None
        assert (gate.concurrency_key, gate.rate_key) == ("keyed:a", "keyed:provider")
        taken = store.launches.claim_next(runner_id="host-y")
        assert taken is not None
        assert taken.run_id == other  # b's run starts; a's second waits, unclaimed
        assert store.launches.claim_next(runner_id="host-y") is None
    finally:
        store.close()
    why = json.loads(project.wfrun("why", second, "--json").stdout)
    assert any(f"waits for concurrency key 'keyed:a' (limit 1, queue): held by run(s) "
               f"{first}" in line for line in why["reasons"]), why["reasons"]


def test_cancel_newest_and_cancel_running(project: Project) -> None:
    project.workflow("newest", KEYED.format(strategy="cancel_newest"))
    (held,) = project.queue("newest", [{"repo": "a"}])
    _hold(project, held)
    (late,) = project.queue("newest", [{"repo": "a"}])
    assert project.launch_status(late) == "cancelled"  # the key was full: the new one goes
    assert project.launch_status(held) == "starting"

    project.workflow("running", KEYED.format(strategy="cancel_running"))
    (old,) = project.queue("running", [{"repo": "a"}])
    _hold(project, old)
    (new,) = project.queue("running", [{"repo": "a"}])
    assert project.launch_status(new) == "queued"
    # The older run holding the key is asked to stop: its claim's lease is live, and
    # only its holder ends such a launch, `starting` or `running` (ADR 0009, lever 3).
    # The new one waits for it.
    assert project.launch_status(old) == "starting"
    store = project.store()
    try:
        asked = [e.type for e in store.run_events.read(run_id=old)]
        assert "cancel_requested" in asked
        # Its holder honours the request (as a host's lease keeper would): the key
        # is free and the new one is next.
        token = store.launches.get(old).claim_token  # type: ignore[union-attr]
        assert store.launches.cancel(old, claim_token=token).status == "cancelled"  # type: ignore[union-attr]
    finally:
        store.close()
    _hold(project, new)


def test_a_key_that_does_not_render_is_a_one_line_refusal(project: Project) -> None:
    project.workflow("keyed", KEYED.format(strategy="queue").replace("input.repo }}\", limit",
                                                                     "input.nope }}\", limit"))
    store = project.store()
    try:
        coordinator = detached_coordinator(project.workspace(), store)
        with pytest.raises(PreflightError, match=r"concurrency key: .*nope"):
            coordinator.prepare("keyed", {"repo": "a"})
        assert store.launches.query(limit=10) == []  # nothing was queued
    finally:
        store.close()


SLEEPY = """\
concurrency: {key: "{{ input.repo }}", limit: 1}
input:
  type: object
  properties: {repo: {type: string}}
start: a
nodes:
  a: {action: {shell: [sleep, "0.6"]}}
"""


def test_a_real_host_runs_one_key_at_a_time_and_another_key_at_once(
        project: Project) -> None:
    """3 runs of key A and 1 of key B on a 4-slot host: A's never overlap, B does not
    wait for them."""
    project.workflow("sleepy", SLEEPY)
    a1, a2, a3, b1 = project.queue("sleepy", [{"repo": "A"}, {"repo": "A"}, {"repo": "A"},
                                              {"repo": "B"}])
    host = project.host("--max-runs", "4")
    project.wait_host_ready(host)
    wait_for("every run to end", lambda: all(
        project.launch_status(r) == "done" for r in (a1, a2, a3, b1)), timeout=120)
    a = sorted((project.launch(r) for r in (a1, a2, a3)), key=lambda r: r.started_at or 0)
    for earlier, later in itertools.pairwise(a):
        assert earlier.finished_at is not None
        assert (later.started_at or 0) >= earlier.finished_at  # never two A's at once
    b = project.launch(b1)
    assert (b.started_at or 0) < (a[1].started_at or 0)  # B ran beside the first A
