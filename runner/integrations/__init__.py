"""Agent-client integrations shipped inside the wheel (issue 11).

Each client has a subpackage holding the files the client loads (a Pi extension,
hook settings, ...) and an `install` that writes them into a project. These
modules only copy files: the session logic they connect to is `wfrun bridge`
(runner/host/bridge), so they import nothing from wfrun's layers.
"""

from __future__ import annotations
