"""A running `wfrun host` pays the input scrub when its queue goes empty (docs/store.md,
"The input scrub"): once the launches it ran have ended, neither the store's file nor
its WAL holds their private input, while the host runs on (the cleared rows were
written to the WAL; the file kept the old pages until a checkpoint). Real host
process; the files read by another process (`cat`), never opened by this one."""

from __future__ import annotations

import subprocess

from standalonekit import Project, wait_for

ECHO = """\
    input: {type: object, required: [task], properties: {task: {type: string}}}
    start: one
    nodes:
      one: {compute: "{{ input.task | length }}"}
"""


def _stored(project: Project, text: str) -> bool:
    state = project.root / ".wfrun" / "state"
    files = [str(f) for f in (state / "store.sqlite3", state / "store.sqlite3-wal")
             if f.exists()]
    data = subprocess.run(["cat", *files], capture_output=True, timeout=30,
                          check=False).stdout
    return text.encode() in data


def test_a_host_scrubs_the_input_of_the_runs_it_ran_once_its_queue_is_empty(
        project: Project) -> None:
    project.workflow("echo", ECHO)
    tasks = [f"host-scrub-private-{i}-9e4b" for i in range(3)]
    ids = project.queue("echo", [{"task": task} for task in tasks])
    assert all(_stored(project, task) for task in tasks)  # queued: stored
    host = project.host("--no-controllers", "-q")
    project.wait_host_ready(host)
    wait_for("the runs to end", lambda: all(
        project.launch_status(run_id) == "done" for run_id in ids))
    wait_for("the store scrubbed", lambda: not any(_stored(project, t) for t in tasks))
    assert host.poll() is None  # scrubbed by the running host, not by its exit
