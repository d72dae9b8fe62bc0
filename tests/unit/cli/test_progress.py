"""Foreground progress (issue 34 item 11): plain lines without rich off a terminal.

Each case runs `Progress` in a fresh interpreter whose stderr is a pipe, feeds it the
engine events a run emits, and reads what it wrote: the same words as the terminal
view, no markup, and rich never imported (FORCE_COLOR still asks for the rich view).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

_FEED = r"""
import json, sys
from types import SimpleNamespace
from runner.cli.progress import Progress
state = SimpleNamespace(steps=1)
events = [
    {"type": "node_started", "node": "greet"},
    {"type": "node_finished", "node": "greet", "payload": {"outcome": "ok", "duration_ms": 3}},
    {"type": "node_failed", "node": "[b]x[/b]", "payload": {
        "outcome": "failed", "duration_ms": 7, "will_retry": True, "retry_in_ms": 1500,
        "error": {"message": "exit 4\n  [red]boom[/]"}}},
    {"type": "notification_emitted", "payload": {"message": "hi [you]", "notification_id": "n1"}},
    {"type": "include_entered", "node": "child"},
    {"type": "include_exited", "node": "child", "payload": {"exit": "done"}},
    {"type": "run_paused"},
]
with Progress() as progress:
    for event in events:
        progress(event, state)
print(json.dumps({"rich": "rich" in sys.modules, "shown": sorted(progress.shown)}))
"""


def _feed(**env: str) -> tuple[dict[str, object], str]:
    base = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    out = subprocess.run([sys.executable, "-c", _FEED], env={**base, **env},
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout), out.stderr


def test_off_a_terminal_progress_writes_plain_lines_without_importing_rich() -> None:
    seen, err = _feed()
    assert seen == {"rich": False, "shown": ["n1"]}
    assert err.splitlines() == [
        "✓ greet  3 ms",
        "✗ [b]x[/b]  7 ms  exit 4 [red]boom[/]  retry in 1.5s",
        "! hi [you]",
        "↘ child",
        "↗ child (done)",
        "run paused",
    ]


def test_forced_colour_uses_the_rich_view_with_the_same_words() -> None:
    seen, err = _feed(FORCE_COLOR="1")
    assert seen == {"rich": True, "shown": ["n1"]}
    assert "\x1b[" in err  # styled
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err).splitlines()
    assert "✓ greet  3 ms" in plain
    assert "! hi [you]" in plain  # user text is never read as markup
