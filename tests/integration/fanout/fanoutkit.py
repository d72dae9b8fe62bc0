"""A project with fan-out workflows, driven through real `wfrun` processes.

The map's items are shell actions that log `start N` and `end N` to `log` (lines
appended whole), so the file says how often each item really started and ended and
how many ran at once. An item N >= GATE waits for the file `go`: a test catches the
map with items ended, running and pending, however slow the machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from waiting import DEADLINE, wait_until

ITEMS = 50
AT_ONCE = 4
GATE = 10
MAP = f"""\
    name: fifty
    start: ls
    max_steps: 200
    nodes:
      ls: {{compute: "{{{{ range({ITEMS}) | list }}}}"}}
      files:
        map:
          over: "{{{{ outputs.ls }}}}"
          as: n
          max_concurrency: {AT_ONCE}
          do:
            action:
              use_shell: true
              shell: >-
                echo "start {{{{ n }}}}" >> log;
                while [ $(grep -c start log) -lt {AT_ONCE} ]; do sleep 0.1; done;
                if [ {{{{ n }}}} -ge {GATE} ]; then while [ ! -e go ]; do sleep 0.1; done; fi;
                echo "end {{{{ n }}}}" >> log; echo {{{{ n }}}}
      out:
        compute: "{{{{ outputs.files | map(attribute='stdout') | map('trim') | list }}}}"
    edges:
      - {{from: ls, to: files}}
      - {{from: files, to: out}}
"""
PARALLEL = """\
    name: reviews
    start: reviews
    nodes:
      reviews:
        parallel:
          branches:
            broken: {action: {use_shell: true, shell: "echo start broken >> log; exit 3"}}
            slow:
              action:
                use_shell: true
                shell: >-
                  echo start slow >> log; while [ ! -e go ]; do sleep 0.1; done;
                  echo end slow >> log
            quick: {compute: "{{ 'fine' }}"}
      merged: {compute: "{{ 'merged' }}"}
      report:
        compute: >-
          {{ {'error': results.reviews.error.code,
              'branches': results.reviews.branches | dictsort | map('last')
                          | map(attribute='outcome') | list,
              'outputs': outputs.reviews} }}
    edges:
      - {from: reviews, switch: {on: $result.outcome, cases: {ok: merged}, default: report}}
"""
CHILD = """\
    name: stylecheck
    input: {type: object, required: [who], properties: {who: {type: string}}}
    start: greet
    nodes:
      greet: {action: {shell: [echo, "hi {{ input.who }}"]}}
      out: {compute: "{{ outputs.greet.stdout | trim }}"}
    edges:
      - {from: greet, to: out}
"""
WITH_CHILD = """\
    name: withchild
    start: both
    nodes:
      both:
        parallel:
          branches:
            style: {workflow: stylecheck, input: {who: "{{ 'ada' }}"}}
            quick: {compute: "{{ 1 }}"}
"""
EXPECTED = [str(i) for i in range(ITEMS)]


@dataclass
class Project:
    root: Path
    store: str | None = None  # a Postgres URL, or None for the SQLite default
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("WFRUN_STORE",
                                                                 "WFRUN_CRASH_AT")}
        if self.store:
            env["WFRUN_STORE"] = self.store
        return env

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "runner", "--project", str(self.root), *args]

    def start(self, workflow: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(self.argv("run", workflow, "--json", "-q"), cwd=self.root,
                                env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.procs.append(proc)
        return proc

    def host(self) -> subprocess.Popen[str]:
        """`wfrun host` with a 2 s lease (a test knob): a killed host's runs are taken
        over by the next one soon after."""
        proc = subprocess.Popen(self.argv("host", "--lease", "2", "--no-controllers"),
                                cwd=self.root, env=self.env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.procs.append(proc)
        return proc

    def status(self, run_id: str) -> str:
        shown = self.wfrun("show", run_id, "--json")
        assert shown.returncode == 0, shown.stderr
        status: str = json.loads(shown.stdout)["status"]
        return status

    def shown_items(self, run_id: str, node: str) -> dict[str, int] | None:
        """`wfrun show --json`'s item counts of a fan-out node (None: none shown)."""
        shown = self.wfrun("show", run_id, "--json")
        assert shown.returncode == 0, shown.stderr
        entry = next(e for e in json.loads(shown.stdout)["timeline"] if e["node"] == node)
        items: dict[str, int] | None = entry.get("items")
        return items

    def resume(self, run_id: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(self.argv("resume", run_id, "--json", "-q"), cwd=self.root,
                                env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.procs.append(proc)
        return proc

    def items(self, run_id: str, node: str, visit: int = 1) -> list[dict[str, Any]]:
        """The node's item rows, read from the store as a view would."""
        from runner.store.domain._fanout import ItemKey

        store = self.open_store()
        try:
            rows = store.fanout.items(ItemKey(run_id, node, visit))
        finally:
            store.close()
        return [{"state": r.state, "starts": r.starts,
                 "output": json.loads(r.output_json) if r.output_json else None}
                for r in rows]

    def held_ahead(self, run_id: str, node: str, visit: int = 1) -> set[str]:
        """The items a host's slots hold claimed ahead (ADR 0014): counted a start,
        not run yet. Read from the rows themselves (views show them `pending`)."""
        from runner.store.domain._itemclaims import AHEAD_TOKEN

        store = self.open_store()
        try:
            with store.fanout._c.read() as tx:  # the rows' own token: no view shows it
                rows = tx.all("SELECT item_index FROM fanout_items WHERE run_id = :run AND"
                              " node_id = :node AND visit = :visit AND state = 'running'"
                              " AND claim_token LIKE :ahead",
                              {"run": run_id, "node": node, "visit": visit,
                               "ahead": AHEAD_TOKEN + "%"})
        finally:
            store.close()
        return {str(r["item_index"]) for r in rows}

    def running(self) -> set[str]:
        """Items whose start the log has and whose end it has not (yet)."""
        ends = self.counts("end")
        return {n for n, k in self.counts("start").items() if ends[n] < k}

    def open_store(self) -> Any:
        if self.store:
            from runner.store.postgres import PostgresStore

            return PostgresStore(self.store)
        from runner.store import SqliteStore

        return SqliteStore(self.root / ".wfrun" / "state" / "store.sqlite3")

    def wfrun(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), cwd=self.root, env=self.env(),
                              capture_output=True, text=True, timeout=120, check=False)

    def finish(self, proc: subprocess.Popen[str]) -> dict[str, Any]:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 1), (proc.returncode, err)
        value: dict[str, Any] = json.loads(out)
        return value

    def kill(self, proc: subprocess.Popen[str]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=DEADLINE)

    def kill_group(self, proc: subprocess.Popen[str]) -> None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=DEADLINE)

    def log(self) -> list[tuple[str, str]]:
        path = self.root / "log"
        if not path.exists():
            return []
        return [tuple(line.split(" ", 1)) for line in path.read_text().splitlines()]  # type: ignore[misc]

    def counts(self, kind: str) -> Counter[str]:
        return Counter(n for k, n in self.log() if k == kind)

    def wait_log(self, kind: str, at_least: int) -> None:
        wait_until(lambda: sum(self.counts(kind).values()) >= at_least,
                   what=lambda: f"{at_least} '{kind}' lines; log: {self.log()}")

    def go(self) -> None:
        (self.root / "go").touch()

    def run_ids(self) -> list[str]:
        runs = self.root / ".wfrun" / "runs"
        return sorted(n for n in os.listdir(runs) if not n.startswith(".")) \
            if runs.exists() else []

    def only_run(self) -> str:
        """The run id, from the launch queue (bundles may live in the database)."""
        rows = self.listed()
        assert len(rows) == 1, rows
        run_id: str = rows[0]["run_id"]
        return run_id

    def listed(self) -> list[dict[str, Any]]:
        listed = self.wfrun("runs", "--json")
        assert listed.returncode == 0, listed.stderr
        data = json.loads(listed.stdout)
        rows: list[dict[str, Any]] = data["runs"] if isinstance(data, dict) else data
        return rows


def peak(log: list[tuple[str, str]]) -> int:
    """The most items between their `start` and `end` lines at once."""
    now = top = 0
    for kind, _ in log:
        now += 1 if kind == "start" else -1
        top = max(top, now)
    return top


def make(root: Path, store: str | None = None) -> Project:
    flows = root / ".wfrun" / "workflows"
    flows.mkdir(parents=True)
    (flows / "fifty.yaml").write_text(textwrap.dedent(MAP))
    (flows / "reviews.yaml").write_text(textwrap.dedent(PARALLEL))
    (flows / "stylecheck.yaml").write_text(textwrap.dedent(CHILD))
    (flows / "withchild.yaml").write_text(textwrap.dedent(WITH_CHILD))
    return Project(root, store)
