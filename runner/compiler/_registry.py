"""The steps installed packages register under the entry-point group `wfrun.steps`.

Read from the installed metadata once per process (installing a package that
adds a step means starting wfrun again, as for any plugin). The compiler reads
each step's declared `with:` schema; the engine loads the step to run it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

STEP_GROUP = "wfrun.steps"


@lru_cache(maxsize=1)
def registered_steps() -> dict[str, EntryPoint]:
    """The installed steps by name (read once per process: installing a package that
    adds one means starting wfrun again, as for any plugin). importlib.metadata loads
    here, not with the module: it costs every CLI command ~15 ms (email, zipfile, csv)
    and only a workflow that names a step needs it."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=STEP_GROUP)}


@lru_cache(maxsize=64)
def _declared_schema(name: str) -> tuple[Mapping[str, Any] | None, str | None]:
    ep = registered_steps().get(name)
    if ep is None:
        return None, None
    try:
        target = ep.load()
    except Exception as exc:  # a broken plugin is the author's to fix: say which one
        return None, f"step '{name}' ({ep.value}) failed to load: {type(exc).__name__}: {exc}"
    schema = getattr(target, "with_schema", None)
    return (schema if isinstance(schema, Mapping) else None), None


def step_with_schema(name: str) -> tuple[Mapping[str, Any] | None, str | None]:
    """(the `with:` schema a registered step declares or None, a load problem or None)."""
    return _declared_schema(name)


