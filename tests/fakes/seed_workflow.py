"""The seed scenario's workflow, shared by every real-agent and host test.

`review` takes a task and asks the session's agent for a plan; the scenario edits
its prompt ("Plan" -> "Review") while a launch is queued, so activation fails with
`source_changed`. Indented as written: callers dedent it where they need to.
"""

from __future__ import annotations

import re

AGENT_WF = """
    input:
      type: object
      required: [task]
      properties: {task: {type: string}}
    start: plan
    nodes:
      plan:
        agent:
          prompt: "Plan {{ input.task }}."
          output:
            type: object
            required: [summary]
            properties: {summary: {type: string}}
"""
# The `workflow start` reply's run id.
RUN_RE = re.compile(r"queued \(run (?P<run>[\w-]+)\)")
