"""The run title renders under the workflow's `template_budget:` (issue 10), like every
node's templates: a tight budget falls back to the workflow's name, the default one
renders the same title in full."""

from __future__ import annotations

import json
from pathlib import Path

from everyday import Project

TITLED = """\
    start: a
    title: "{{{{ input.s * input.n }}}}"
    {budget}
    input:
      type: object
      properties: {{s: {{type: string}}, n: {{type: integer}}}}
    nodes:
      a:
        compute: "1"
    """


def _title(project: Project, name: str, budget: str) -> str:
    project.workflow(name, TITLED.format(budget=budget))
    done = project.wfrun("run", name, "-q", "--json", "--input",
                         json.dumps({"s": "ab", "n": 300}))
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    manifest = json.loads((project.runs_dir / run_id / "manifest.json").read_text())
    title: str = manifest["title"]
    return title


def test_the_title_obeys_the_workflow_budget(tmp_path: Path) -> None:
    project = Project(tmp_path)
    # 600 characters: within the default budget, over a workflow's max_output of 100.
    assert _title(project, "roomy", "") == "ab" * 300
    assert _title(project, "tight", "template_budget: {max_output: 100}") == "tight"
