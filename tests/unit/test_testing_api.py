"""`runner.testing`: what a test of wfrun code builds a runner from (procrastinate's
`testing.py`). Its names are public: this list changes only on purpose."""

from __future__ import annotations

from pathlib import Path

import runner.testing as testing
from runner.testing import FakeClock, build_coordinator, sqlite_store, workspace

HELLO = """\
    input: {type: object, required: [name], properties: {name: {type: string}}}
    start: greet
    nodes:
      greet: {compute: "{{ 'hello ' ~ input.name }}"}
"""


def test_the_export_list_is_exactly_the_public_helpers() -> None:
    assert testing.__all__ == ["ROLES", "FakeClock", "Role", "build_coordinator",
                               "sqlite_store", "workspace", "write_workflow"]
    for name in testing.__all__:
        assert getattr(testing, name) is not None, name


def test_a_plain_runner_on_a_fake_clock_runs_a_queued_launch(tmp_path: Path) -> None:
    clock = FakeClock()
    ws = workspace(tmp_path / "proj", clock=clock, workflows={"hello": HELLO})
    with sqlite_store(ws, clock=clock) as store:
        runner = build_coordinator(ws, store, "plain", runner="test")
        assert runner.clock is clock  # the workspace's clock, as for every role
        assert runner.secrets == ()  # plain: nothing taken from this process
        record = runner.prepare("hello", {"name": "x"})
        # The row is stamped on the fake clock: leases and times agree with the runner.
        assert record.created_at == round(clock.now() * 1000)
        clock.advance(5)
        outcome = runner.execute(runner.claim(record.run_id))
        assert outcome is not None
        assert (outcome.status, outcome.final_output) == ("completed", "hello x")
        row = store.launches.get(record.run_id)
        assert row is not None
        assert row.status == "done"
        assert row.updated_at == round(clock.now() * 1000)


def test_every_role_is_described_and_builds(tmp_path: Path) -> None:
    ws = workspace(tmp_path / "proj", clock=FakeClock(), workflows={"hello": HELLO})
    with sqlite_store(ws) as store:
        for role, traits in testing.ROLES.items():
            runner = build_coordinator(ws, store, role, runner=f"r-{role}")
            assert runner.runner_id == f"r-{role}"
            # Only the roles that run a session's launch outside it hand agent steps back.
            assert runner.options.hand_back == traits.hands_back, role
            assert (runner.options.processes is not None) == traits.processes, role
