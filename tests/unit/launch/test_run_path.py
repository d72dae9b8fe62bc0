"""The path a plain queued run walks through the launch layer (issue 36, "Prove it").

A warm 3-node chain (fixtures/workflows/chain3.yaml), queued and run the way `wfrun
start` and a host do it (`prepare`, `claim_next`, `execute` on the coordinator
`detached_coordinator` builds), traced with `sys.setprofile`: it enters only the
launch modules that do its work. No forwarding hop through the coordinator, none of
the machinery it does not use (a rerun's plan, a session's hand-back, the crash
seam, the held-input redaction), and no call back up into the host layer that built
the runner (its workflows resolve in the compiler, compiler/_workflows.py).
`bench/bench_path.py --list` prints the whole path.
"""

from __future__ import annotations

import pytest
from runpath import trace_plain_run

from runner.compiler._workflows import Workflows
from runner.launch import LaunchCoordinator

#: The launch modules a plain run needs: the checks and the queued row, the claim, the
#: run path and its link to the bundle, the ending, the engine it builds.
#: Not `_items`: the store's fan-out ledger is made only when a fan-out node asks.
#: Not `_keeper`: its renewer holds the activation itself (`add`, `remove` are its own).
WALKED = {"_queue", "_activator", "_endings", "_engines"}


@pytest.fixture(scope="module")
def entered(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The `runner` modules entered by one warm queued run of the chain."""
    def resolves_in_the_compiler(coordinator: LaunchCoordinator) -> None:
        assert isinstance(coordinator.resolver, Workflows)

    return {module for module, _ in trace_plain_run(
        tmp_path_factory.mktemp("path") / "proj", resolves_in_the_compiler)}


def test_a_plain_run_enters_only_the_launch_modules_that_do_its_work(
        entered: set[str]) -> None:
    launch = {m.removeprefix("runner.launch.") for m in entered
              if m.startswith("runner.launch.")}
    assert launch <= WALKED, sorted(launch - WALKED)
    # The coordinator is wiring: what a caller calls is its collaborators' methods.
    assert "_coordinator" not in launch


def test_a_plain_run_calls_nothing_back_in_the_host_layer(entered: set[str]) -> None:
    assert sorted(m for m in entered if m.startswith("runner.host.")) == []
    assert "runner.compiler._workflows" in entered  # the runner's resolver, one layer down


def test_a_plain_run_asks_once_whether_its_run_started(entered: set[str]) -> None:
    # Whether the run has a started bundle is the engine's one question, which discards
    # a half-made one in the same call (`BundleSpace.unstarted`): the reader is not asked.
    assert "runner.engine._reader" not in entered
    # Its sources are recorded from `sources_json`, made once per definition.
    assert "runner.compiler._model" not in entered
