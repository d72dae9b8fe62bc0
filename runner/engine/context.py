"""Template context per scope: a child sees its own `input` and `outputs`."""

from __future__ import annotations

from typing import Any


def scoped(values: dict[str, Any], scope: str) -> dict[str, Any]:
    """Entries written in `scope`, keyed by their local ids.

    Root nodes have ids without '/'; a node of mount `fix` is `fix/plan`; the
    mount itself (`fix`) carries the exit output `{exit, output}` in its parent.
    """
    if not scope:
        return {k: v for k, v in values.items() if "/" not in k}
    prefix = scope + "/"
    cut = len(prefix)
    return {k[cut:]: v for k, v in values.items()
            if k.startswith(prefix) and "/" not in k[cut:]}
