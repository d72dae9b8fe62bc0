"""`parallel` and `map` in the engine (DESIGN §10): outputs and results addressing,
fail_fast, max_steps per item, the item ceiling, retries per item, secrets kept out of
the item ledger. The ledger here is the engine's own (MemoryLedger); the store's is
proven in tests/integration/fanout and tests/integration/store/test_store_fanout.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from waiting import DEADLINE, wait_until

from runner.engine import RunControl, RunReader
from runner.engine._items import ItemEnd, MemoryLedger
from runner.engine._secrets import SecretSource

MAP = """\
start: ls
max_steps: {steps}
nodes:
  ls: {{compute: "{{{{ [3, 1, 2] }}}}"}}
  each:
    map:
      over: "{{{{ outputs.ls }}}}"
      as: n
      do: {{compute: "{{{{ {{'n': n, 'i': index, 'twice': n * 2}} }}}}"}}
  last: {{compute: "{{{{ outputs.each | map(attribute='twice') | list }}}}"}}
edges:
  - {{from: ls, to: each}}
  - {{from: each, to: last}}
"""


def test_a_map_yields_its_outputs_in_item_order_and_counts_a_step_per_item(env: Any) -> None:
    out = env.engine().start(env.workflow(MAP.format(steps=10)))
    assert out.status == "completed", out.error
    assert out.final_output == [6, 2, 4]
    assert out.state.outputs["each"] == [{"n": 3, "i": 0, "twice": 6},
                                         {"n": 1, "i": 1, "twice": 2},
                                         {"n": 2, "i": 2, "twice": 4}]
    items = out.state.results["each"]["items"]
    assert [i["outcome"] for i in items] == ["ok"] * 3
    assert out.state.steps == 3 + 3  # three nodes, three items


def test_a_map_that_would_pass_max_steps_starts_no_item(env: Any) -> None:
    out = env.engine().start(env.workflow(MAP.format(steps=4)))
    assert out.status == "failed"
    assert out.error is not None
    assert out.error["code"] == "max_steps"
    assert "3 items" in out.error["message"]


def test_over_must_yield_a_list_within_the_item_limit(env: Any) -> None:
    flow = """\
    start: each
    nodes:
      each:
        map: {over: "{{ input.xs }}", max_items: 2, do: {compute: "{{ item }}"}}
    """
    d = env.workflow(flow)
    many = env.engine().start(d, {"xs": [1, 2, 3]})
    assert many.status == "failed"
    assert many.error is not None
    assert many.error["code"] == "too_many_items"
    assert "nodes.each.map.over yielded 3 items, over the limit of 2" in many.error["message"]
    bad = env.engine().start(d, {"xs": "abc"})
    assert bad.error is not None
    assert bad.error["code"] == "bad_over"


class _Witness(MemoryLedger):
    """A ledger that leaves a file once an item's end is recorded: a branch waiting on
    it starts its failure only after that item has ended for the engine too."""

    def __init__(self, index: int, path: Path) -> None:
        super().__init__()
        self.index, self.path = index, path

    def _saw(self, ends: Sequence[ItemEnd]) -> None:
        if any(e.index == self.index for e in ends):
            self.path.touch()

    def claim(self, node: str, visit: int, limit: int,
              settling: Sequence[ItemEnd] = ()) -> tuple[list[tuple[int, int]], list[int]]:
        got = super().claim(node, visit, limit, settling)
        self._saw(settling)
        return got

    def settle(self, node: str, visit: int, ends: Sequence[ItemEnd], *,
               claimed: bool = True) -> int:
        left = super().settle(node, visit, ends, claimed=claimed)
        self._saw(ends)
        return left


def test_parallel_fail_fast_cancels_the_rest_and_a_result_switch_routes_it(env: Any) -> None:
    # Fail-fast may cancel a branch that has not ended, so `bad` fails only once `fine`'s
    # end is in the ledger; otherwise a loaded machine could cancel `fine` too.
    env.write("gate.sh", "while [ ! -e never ]; do sleep 0.1; done\n")
    env.write("bad.sh", "while [ ! -e fine.recorded ]; do sleep 0.05; done; exit 4\n")
    flow = """\
    start: both
    nodes:
      both:
        parallel:
          branches:
            bad: {action: {shell: [sh, bad.sh]}}
            hang: {action: {shell: [sh, gate.sh]}}
            fine: {compute: "{{ 'yes' }}"}
      ok: {compute: "{{ 'ok' }}"}
      caught:
        compute: "{{ [results.both.error.item, outputs.both.fine, outputs.both.hang] }}"
    edges:
      - {from: both, switch: {on: $result.outcome, cases: {ok: ok, failed: caught}}}
    """
    ledger = _Witness(2, env.root / "fine.recorded")
    out = env.engine(items=lambda: ledger).start(env.workflow(flow))
    assert out.status == "completed", out.error
    assert out.final_output == ["bad", "yes", None]
    branches = out.state.results["both"]["branches"]
    assert {k: v["outcome"] for k, v in branches.items()} == {
        "bad": "failed", "hang": "cancelled", "fine": "ok"}


def test_a_map_without_fail_fast_runs_every_item_and_retries_each_alone(env: Any) -> None:
    flow = """\
    start: each
    nodes:
      each:
        map:
          over: "{{ [0, 1, 2] }}"
          max_concurrency: 2
          do:
            action:
              use_shell: true
              shell: >-
                echo x >> tries.{{ item }};
                [ {{ item }} -ne 1 ] || [ $(wc -l < tries.1) -ge 2 ]
            retry: {attempts: 2}
    """
    out = env.engine().start(env.workflow(flow))
    assert out.status == "completed", out.error
    assert [len((env.root / f"tries.{i}").read_text().split()) for i in range(3)] == [1, 2, 1]
    logs = [e["node"] for e in env.events(out.run_id, "node_log")]
    assert sorted(logs) == ["each[0]", "each[1]", "each[1]", "each[2]"]


def test_an_item_secret_never_reaches_the_ledger(env: Any) -> None:
    flow = """\
    secrets: [TOKEN]
    start: each
    nodes:
      each:
        map: {over: "{{ [1] }}", do: {compute: "{{ 'key=' ~ secrets.TOKEN }}"}}
    """
    ledger = MemoryLedger()
    d = env.workflow(flow)
    engine = env.engine(items=lambda: ledger, secret_source=SecretSource({"TOKEN": "s3cr3t-v4lue"}))
    out = engine.start(d)
    assert out.status == "completed", out.error
    stored = json.dumps([r.output for r in ledger.items("each", 1)])
    assert "s3cr3t-v4lue" not in stored
    assert "***" in stored


def test_item_outputs_are_plain_values_a_long_one_kept_as_an_artifact(env: Any) -> None:
    """An item's output is what its body returned, never a recorded form: one that looks
    like an artifact ref is user data (escaped in the trace, given back as it was, no
    file read for it), and a long one moves to `artifacts/` with the node's end and
    reads back whole."""
    flow = """\
    start: each
    nodes:
      each:
        map:
          over: "{{ [0, 1] }}"
          as: n
          do: {compute: "{{ {'$artifact': {'path': 'artifacts/none', 'bytes': 3}} if n == 0
                             else 'x' * 5000 }}"}
    """
    engine = env.engine()
    out = engine.start(env.workflow(flow))
    assert out.status == "completed", out.error
    expected = [{"$artifact": {"path": "artifacts/none", "bytes": 3}}, "x" * 5000]
    assert out.final_output == expected
    trace = (env.runs / out.run_id / "trace.jsonl").read_text()
    assert '"$escaped"' in trace
    assert "x" * 5000 not in trace
    assert RunReader(env.runs).final_output(out.run_id) == expected


class _OneSession:
    """A session-like executor (`name == "session"`): it holds one step at a time, so
    two turns inside it at once is the bug this records."""

    name = "session"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.most = 0
        self.order: list[str] = []

    def run_turn(self, step: Any, message: str, kind: Any) -> None:
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
            self.order.append(step.contract.step)
        threading.Event().wait(0.05)  # room for another turn to come in, if one could
        step.handle_tool_call({"action": "submit", "step": step.contract.step,
                               "attempt": step.contract.attempt, "output": {"ok": True}})
        with self.lock:
            self.active -= 1


def test_a_session_gets_agent_items_one_at_a_time_in_item_order(env: Any) -> None:
    flow = """\
    start: each
    nodes:
      each:
        map:
          over: "{{ [0, 1, 2, 3] }}"
          max_concurrency: 4
          do: {agent: {prompt: "review {{ item }}"}}
      both:
        parallel:
          branches:
            one: {agent: "first"}
            two: {agent: "second"}
            shell: {action: {shell: [echo, hi]}}
    edges:
      - {from: each, to: both}
    """
    session = _OneSession()
    out = env.engine(executor=session).start(env.workflow(flow))
    assert out.status == "completed", out.error
    assert session.most == 1
    assert session.order == ["each[0]", "each[1]", "each[2]", "each[3]", "both[one]",
                             "both[two]"]


def test_a_clean_park_gives_running_items_back_uncounted(env: Any) -> None:
    """A park (a host's SIGTERM, a Ctrl-C) stops items; it is not a death, so their start
    is not counted: three parks in a row never fail an item `interrupted`."""
    flow = """\
    start: each
    nodes:
      each:
        map:
          over: "{{ [0, 1] }}"
          do:
            action:
              use_shell: true
              shell: "echo x >> started.{{ item }}; while [ ! -e go ]; do sleep 0.1; done"
    """
    d = env.workflow(flow)
    ledger = MemoryLedger()
    engine = env.engine(items=lambda: ledger)
    run_id: str | None = None
    for round_ in range(1, 4):
        run_id = _parked_once(env, engine, d, run_id, round_)
        assert [r.starts for r in ledger.items("each", 1)] == [0, 0]
    assert run_id is not None
    (env.root / "go").touch()
    out = engine.resume(run_id, env.resolver())
    assert out.status == "completed", out.error
    assert [(r.state, r.starts) for r in ledger.items("each", 1)] == [("ok", 1), ("ok", 1)]


def _parked_once(env: Any, engine: Any, d: Any, run_id: str | None, round_: int) -> str:
    """Start (or resume) the run, wait for both items to start, park it cleanly."""
    control = RunControl()
    done: list[Any] = []

    def run() -> None:
        if run_id is None:
            done.append(engine.start(d, control=control))
        else:
            done.append(engine.resume(run_id, env.resolver(), control=control))

    def started(i: int) -> int:
        path = env.root / f"started.{i}"
        return len(path.read_text().split()) if path.exists() else 0

    thread = threading.Thread(target=run)
    thread.start()
    wait_until(lambda: started(0) == started(1) == round_, what="both items to start")
    control.park("a host stops", auto_resume=True)
    thread.join(timeout=DEADLINE)
    assert done[0].parked
    rid: str = done[0].run_id
    return rid


class _Hosted(MemoryLedger):
    """A ledger whose items other hosts run (`wait_for_hosts`: True while one is open),
    counting the reads of its rows."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.asked = 0

    def wait_for_hosts(self, node: str, visit: int) -> bool:
        self.asked += 1
        return any(r.state in ("pending", "running") for r in super().items(node, visit))

    def items(self, node: str, visit: int,
              indexes: Sequence[int] | None = None) -> list[Any]:
        self.reads += 1
        return super().items(node, visit, indexes)


SHARED = """\
start: each
nodes:
  each:
    map:
      over: "{{ range(5) | list }}"
      fail_fast: FAIL_FAST
      do: {action: {shell: [printf, x]}}
"""


def test_a_shared_map_parks_for_its_hosts_without_reading_its_rows(env: Any) -> None:
    """The parent of a map the hosts run parks at once: reading its rows first (a
    1,000-item map's, ~5 ms) only delayed the hosts' first items."""
    ledger = _Hosted()
    engine = env.engine(items=lambda: ledger)
    out = engine.start(env.workflow(SHARED.replace("FAIL_FAST", "false")))
    assert out.parked
    assert out.waits_for_items
    assert (ledger.reads, ledger.asked) == (0, 1)
    assert [r.state for r in MemoryLedger.items(ledger, "each", 1)] == ["pending"] * 5
    # The hosts end them; the resumed parent reads its rows (no second `wait_for_hosts`,
    # a write on a store) and completes.
    ledger.settle("each", 1, [ItemEnd(i, "ok", i) for i in range(5)], claimed=False)
    done = engine.resume(out.run_id, env.resolver())
    assert done.status == "completed", done.error
    assert done.final_output == [0, 1, 2, 3, 4]
    assert ledger.asked == 1
    assert ledger.reads >= 1


def test_a_shared_fail_fast_map_reads_its_rows_for_an_earlier_failure_first(env: Any) -> None:
    ledger = _Hosted()
    out = env.engine(items=lambda: ledger).start(
        env.workflow(SHARED.replace("FAIL_FAST", "true")))
    assert out.parked
    assert out.waits_for_items
    assert ledger.reads == 1


def test_a_host_in_the_parents_process_runs_the_parents_plan(env: Any) -> None:
    """A host runs a shared map's parent and its items in one process: the item worker
    takes the plan the parent made (the items it opened) instead of rendering `over`
    again; a definition compiled anew (other node objects) is rendered for itself."""
    from runner.engine._fanout import SHARED_PLANS
    from runner.engine._itemhost import ItemHost, open_item_host

    ledger = _Hosted()
    engine = env.engine(items=lambda: ledger)
    d = env.workflow(SHARED.replace("FAIL_FAST", "false"))
    out = engine.start(d)
    assert out.waits_for_items
    kept = SHARED_PLANS.get(out.run_id, d.nodes["each"], 1)
    assert kept is not None
    assert kept.values == [0, 1, 2, 3, 4]
    here = open_item_host(engine, out.run_id, "each", 1, 5, lambda _m: d)
    assert isinstance(here, ItemHost)
    assert here.plan is kept
    anew = env.workflow(SHARED.replace("FAIL_FAST", "false"))
    assert anew.digest == d.digest
    other = open_item_host(engine, out.run_id, "each", 1, 5, lambda _m: anew)
    assert isinstance(other, ItemHost)
    assert other.plan is not kept
    assert other.plan.values == kept.values
    here.close()
    other.close()


class _HostLogs(MemoryLedger):
    """Items as if other hosts ran them: their logs come from the ledger, one per item."""

    def __init__(self, logs: list[dict[str, Any]]) -> None:
        super().__init__()
        self.kept = logs

    def logs(self, node: str, visit: int,
             indexes: Sequence[int] | None = None) -> list[tuple[int, str, dict[str, Any]]]:
        return [(i, f"a{i}", log) for i, log in enumerate(self.kept)
                if indexes is None or i in indexes]


def _log(stdout: str = "", stderr: str = "", **flags: Any) -> dict[str, Any]:
    return {"stdout": stdout, "stderr": stderr, "stdout_truncated": False,
            "stderr_truncated": False, "exit_code": 0, **flags}


HOST_LOGS = [
    _log(),  # a silent item
    _log("done\n", "warn\n", stdout_truncated=True, exit_code=None),
    _log(stderr="password=hunter2-hunter2\n"),  # credential-shaped: redacted
    _log("x" * 5000),  # long: an artifact
    _log("héllo"),  # not ASCII
    _log("\ud800"),  # a lone surrogate: "?"
]


def test_host_logs_are_recorded_checked_as_a_log_of_this_process(env: Any) -> None:
    """Logs other hosts kept are checked again as `record_log` checks its own: short
    ASCII text is written as it came (the plain way), the rest bounded, redacted, moved
    out; and with a secret in the run, masked."""
    flow = f"""\
    start: each
    nodes:
      each:
        map: {{over: "{{{{ range({len(HOST_LOGS)}) | list }}}}", do: {{compute: "{{{{ item }}}}"}}}}
    """
    out = env.engine(items=lambda: _HostLogs(HOST_LOGS)).start(env.workflow(flow))
    assert out.status == "completed", out.error
    got = {e["node"]: e for e in env.events(out.run_id, "node_log")}
    payloads = [got[f"each[{i}]"]["payload"] for i in range(len(HOST_LOGS))]
    assert [got[f"each[{i}]"]["attempt"] for i in range(len(HOST_LOGS))] == [
        f"a{i}" for i in range(len(HOST_LOGS))]
    assert payloads[0] == HOST_LOGS[0]
    assert payloads[1] == HOST_LOGS[1]
    assert "hunter2" not in payloads[2]["stderr"]
    assert payloads[2]["stderr_truncated"] is True  # what was written is not what ran
    assert set(payloads[3]["stdout"]) == {"$artifact"}
    assert payloads[4]["stdout"] == "héllo"
    assert payloads[5]["stdout"] == "?"
    assert payloads[5]["stdout_truncated"] is True

    secret = [_log("key=s3cr3t-v4lue")]
    d = env.workflow(flow.replace(f"range({len(HOST_LOGS)})", "range(1)").replace(
        "start: each", "secrets: [TOKEN]\n    start: each"))
    engine = env.engine(items=lambda: _HostLogs(secret),
                        secret_source=SecretSource({"TOKEN": "s3cr3t-v4lue"}))
    masked = engine.start(d)
    assert masked.status == "completed", masked.error
    [log] = env.events(masked.run_id, "node_log")
    assert log["payload"]["stdout"] == "key=***"


# -- a parent back while hosts run its last items (`_Fanout._await`) ---------------------

def _hosts_hold_all(engine: Any, env: Any, ledger: _Hosted) -> str:
    """Start the shared map (it parks at once), then let hosts claim every item: none
    is left pending, all five run elsewhere."""
    out = engine.start(env.workflow(SHARED.replace("FAIL_FAST", "false")))
    assert out.parked
    assert out.waits_for_items
    got, _ = MemoryLedger.claim(ledger, "each", 1, 5)
    assert len(got) == 5
    run_id: str = out.run_id
    return run_id


def test_a_parent_back_while_hosts_run_its_last_items_waits_for_them(env: Any) -> None:
    """Resumed with every item claimed by hosts and none pending (the claim of the last
    one re-queued it), the parent waits for them instead of parking again: each item
    ended in this process wakes it, and it completes with every output."""
    from runner.engine._items import ITEM_ENDS

    ledger = _Hosted()
    engine = env.engine(items=lambda: ledger)
    run_id = _hosts_hold_all(engine, env, ledger)
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(engine.resume(run_id,
                                                                       env.resolver())))
    thread.start()
    wait_until(lambda: ledger.reads >= 2, what="the parent to read its open rows")
    for i in range(5):  # the hosts end them one by one, as their slots do
        ledger.settle("each", 1, [ItemEnd(i, "ok", i)])
        ITEM_ENDS.ended(run_id, "each", 1)
    thread.join(timeout=DEADLINE)
    assert done[0].status == "completed", done[0].error
    assert done[0].final_output == [0, 1, 2, 3, 4]
    assert ledger.asked == 1  # it never parked again
    assert env.types(run_id).count("run_resumed") == 1


def test_a_parent_waiting_for_hosts_parks_again_when_none_ends_for_a_while(
        env: Any) -> None:
    """No item ends for HOSTS_STALL seconds (a host with no free slot may need this
    run's): the parent parks again, waiting for the hosts as before."""
    from runner.clock import FakeClock

    ledger = _Hosted()
    engine = env.engine(clock=FakeClock(), items=lambda: ledger)
    run_id = _hosts_hold_all(engine, env, ledger)
    again = engine.resume(run_id, env.resolver())  # a fake clock: the wait passes at once
    assert again.parked
    assert again.waits_for_items
    assert ledger.asked == 2
    assert [r.state for r in MemoryLedger.items(ledger, "each", 1)] == ["running"] * 5


def test_a_parent_waiting_for_hosts_parks_again_when_an_item_goes_back_to_pending(
        env: Any) -> None:
    """A host gave an item back (its slot stopped): the parent stops waiting and parks
    for the hosts, one of which takes that item again."""
    from runner.clock import FakeClock

    ledger = _Hosted()
    engine = env.engine(clock=FakeClock(), items=lambda: ledger)
    run_id = _hosts_hold_all(engine, env, ledger)
    reads = ledger.reads
    original = ledger.items

    def items(node: str, visit: int, indexes: Sequence[int] | None = None) -> list[Any]:
        if indexes is not None and ledger.reads == reads + 1:  # the first look while waiting
            ledger.release("each", 1, [2])
        return original(node, visit, indexes)

    ledger.items = items  # type: ignore[method-assign]
    again = engine.resume(run_id, env.resolver())
    assert again.parked
    assert again.waits_for_items
    assert ledger.asked == 2
    assert [r.state for r in MemoryLedger.items(ledger, "each", 1)][2] == "pending"
