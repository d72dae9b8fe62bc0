"""The claim-latency histogram counts each launch once: at its first claim (epoch 1),
not again when a launch let go before it started is claimed a second time."""

from __future__ import annotations

import dataclasses

from runner.host._metrics import first_claim_wait
from runner.store import LaunchRecord


def _claimed(epoch: int) -> LaunchRecord:
    return LaunchRecord(
        run_id="r-1", workflow_ref="w", workflow_path=None, source={},
        definition_digest="d", input_json="{}", options_json=None, status="running",
        runner_id="h", claim_token="t", claim_expires_at=90_000, epoch=epoch,
        affinity_runner_id=None, origin_session_id=None, parent_run_id=None,
        error_code=None, error_message=None, created_at=1_000, updated_at=3_500,
        started_at=None, finished_at=None)


def test_the_first_claim_reports_the_wait_since_the_launch() -> None:
    assert first_claim_wait(_claimed(1)) == 2.5


def test_a_launch_let_go_and_claimed_again_is_not_counted_twice() -> None:
    again = _claimed(2)  # let go by a stopping host before it started: started_at unset
    assert again.started_at is None
    assert first_claim_wait(again) is None
    assert first_claim_wait(dataclasses.replace(again, started_at=2_000)) is None
