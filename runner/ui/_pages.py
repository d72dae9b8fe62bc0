"""HTML pages: Jinja2 templates shipped in the package, autoescaped.

Autoescape is on for every template, so a run title, an output or a node id
containing markup renders as text; the only markup inserted raw is the graph
SVG, which graph.py builds with every piece of user text escaped.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

TEMPLATES = Path(__file__).parent / "templates"
NAV = (("/runs", "Runs"), ("/queue", "Queue"), ("/workflows", "Workflows"),
       ("/triggers", "Triggers"), ("/controllers", "Controllers"))


def iso_ms(ms: Any) -> str:
    if not isinstance(ms, int):
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def short_time(text: Any) -> str:
    return str(text).replace("T", " ").removesuffix("Z")[:19] if text else ""


def duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return ""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


@cache
def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined,
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update({"iso_ms": iso_ms, "short_time": short_time, "duration": duration,
                        "pretty": pretty})
    env.globals["nav"] = NAV
    env.globals["raw_svg"] = lambda svg: Markup(svg)  # built escaped by graph.py
    return env


def render(name: str, **context: Any) -> str:
    context.setdefault("path", "")
    context.setdefault("csrf", "")
    return environment().get_template(name).render(**context)
