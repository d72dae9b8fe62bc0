"""Issue 39 on the run page (`wfrun ui`): a rerun's links both ways, its reused node
marked, a `cache:` hit marked, on the page and in its JSON."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from uikit import Project, ui_server

FLOW = """\
start: one
nodes:
  one:
    compute: "{{ {'n': 1} }}"
    cache: 1h
  two:
    action: {shell: [sh, -c, "test -f fixed"]}
edges:
  - {from: one, to: two}
"""


def test_the_run_page_links_reruns_and_marks_reused_and_cached_nodes(tmp_path: Path) -> None:
    project = Project(tmp_path / "proj")
    project.workflow("flow", FLOW)
    failed = project.wfrun("run", "flow", "--json", "-q")
    assert failed.returncode == 1, failed.stderr
    old = json.loads(failed.stdout)["run_id"]
    again = project.wfrun("run", "flow", "--json", "-q")  # `one` from the cache
    cached = json.loads(again.stdout)["run_id"]
    (project.root / "fixed").touch()
    done = project.wfrun("rerun", old, "--json", "-q")
    assert done.returncode == 0, done.stderr
    new = json.loads(done.stdout)["run_id"]
    with ui_server(project) as ui:
        view = httpx.get(f"{ui.base}/api/runs/{new}").json()
        assert (view["rerun_of"], view["rerun_from"]) == (old, "two")
        rows = view["live"]["timeline"]
        assert [(r["node"], r.get("reused_from")) for r in rows] == [("one", old),
                                                                       ("two", None)]
        assert view["live"]["nodes"] == {"one": "ok", "two": "ok"}
        assert httpx.get(f"{ui.base}/api/runs/{old}").json()["rerun_by"] == [new]
        page = httpx.get(f"{ui.base}/runs/{old}").text
        assert f'class="rerun-by-link" href="/runs/{new}"' in page
        assert f'id="rerun-of-link" href="/runs/{old}"' in httpx.get(
            f"{ui.base}/runs/{new}").text
        hit = httpx.get(f"{ui.base}/api/runs/{cached}").json()["live"]
        assert hit["timeline"][0]["cached_from"] == old
        assert any("a cached result of run" in line for line in hit["logs"]["one"])
