"""Queue N detached launches of one workflow through `wfrun start`'s runtime path, in
one process (N CLI starts would spend most of a test on interpreter start-up).

    python pg_enqueue.py PROJECT STORE_URL WORKFLOW N    # prints one run id a line
"""

from __future__ import annotations

import sys
from pathlib import Path

from runner.compiler import build_catalog
from runner.host.runtime._foreground import queue_detached
from runner.host.runtime._launches import detached_coordinator
from runner.host.runtime._local import Workspace, open_store


def main() -> None:
    project, url, workflow, count = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    ws = Workspace(build_catalog("workflows", project, None), project, project / "state",
                   store_flag=url)
    store = open_store(ws)
    try:
        coordinator = detached_coordinator(ws, store)
        for _ in range(count):
            _name, run_id = queue_detached(coordinator, workflow, {})
            print(run_id, flush=True)
    finally:
        store.close()


if __name__ == "__main__":
    main()
