"""The notification channel names `.wfrun/config.yaml` configures, for the compiler's
check of `notify: channels:` (issue 39): read only when a workflow names a channel."""

from __future__ import annotations

from pathlib import Path

from runner.compiler._discovery import Catalog
from runner.errors import InputError


def with_channels(catalog: Catalog) -> Catalog:
    """`catalog`, told how to read the project's notification channel names, so its
    compiler refuses a `notify` channel `.wfrun/config.yaml` does not configure
    (read only when a workflow names a channel)."""
    root = catalog.project_root
    if catalog.kind == "workflows" and root is not None and catalog.channel_names is None:
        catalog.channel_names = lambda: configured_channels(root)
    return catalog


def configured_channels(project_root: Path) -> frozenset[str] | None:
    """The channel names `notify: channels:` configures; None when the file cannot be
    read as such (that one-line error is the host's, when it loads the channels)."""
    from ._channels import load_channels  # urllib and the store: only when one is named

    try:
        return frozenset(load_channels(project_root))
    except InputError:
        return None
