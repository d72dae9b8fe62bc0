"""What every command needs: the project root, the user folder, the catalogs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from runner.errors import InputError

if TYPE_CHECKING:  # the compiler loads on first use: `wfrun --help` never pays for it
    from runner.clock import Clock
    from runner.compiler import Catalog
    from runner.compiler._discovery import Kind
    from runner.engine import AgentStepExecutor

PROJECT_DIR = ".wfrun"  # runner.compiler._discovery.PROJECT_DIR (a test keeps them equal)


@dataclass
class Context:
    project_flag: str | None
    debug: bool = False
    store: str | None = None  # --store / WFRUN_STORE (runner/host/runtime/_storeconfig.py)
    openai: dict[str, str] = field(default_factory=dict)
    _catalogs: dict[str, Catalog] = field(default_factory=dict)

    @property
    def project_root(self) -> Path | None:
        if self.project_flag:
            try:
                root = Path(self.project_flag).expanduser().resolve(strict=True)
            except (OSError, RuntimeError):  # missing, a symlink loop, unreadable
                raise InputError(f"project folder '{self.project_flag}' does not exist or "
                                 "cannot be resolved (check for a symlink loop)") from None
            if not root.is_dir():
                raise InputError(f"project folder '{self.project_flag}' does not exist")
            if not (root / PROJECT_DIR).is_dir():
                raise InputError(f"'{self.project_flag}' has no {PROJECT_DIR}/ folder; create "
                                 f"it with: mkdir -p {self.project_flag}/{PROJECT_DIR}/workflows")
            return root
        from runner.compiler import find_project_root

        return find_project_root(Path.cwd())

    def require_project(self) -> Path:
        root = self.project_root
        if root is None:
            raise InputError(f"no {PROJECT_DIR}/ folder in this directory or any parent; create "
                             f"one with: mkdir -p {PROJECT_DIR}/workflows (or pass --project DIR)")
        return root

    @property
    def user_dir(self) -> Path | None:
        from runner.compiler._discovery import user_folder_default

        platform_dir: Path | None = None
        if not os.environ.get("WFRUN_HOME"):
            import platformdirs

            platform_dir = Path(platformdirs.user_config_dir("wfrun"))
        return user_folder_default(os.environ.get("WFRUN_HOME"), platform_dir)

    def executor(self, spec: str | None, clock: Clock | None = None
                 ) -> AgentStepExecutor | None:
        """The agent executor a `--agent SPEC` names, with the global openai settings."""
        from runner.host.runtime._local import make_executor

        return make_executor(spec, clock, self.openai)

    def catalog(self, kind: Kind = "workflows") -> Catalog:
        if kind not in self._catalogs:
            from runner.compiler import build_catalog

            catalog = build_catalog(kind, self.project_root, self.user_dir)
            root = catalog.project_root
            if kind == "workflows" and root is not None:
                # The runtime reads config.yaml only when a workflow names a channel, so
                # `validate` of any other workflow never loads runner.host.
                catalog.channel_names = lambda: _configured_channels(root)
            self._catalogs[kind] = catalog
        return self._catalogs[kind]


def _configured_channels(project_root: Path) -> frozenset[str] | None:
    from runner.host.runtime._channelnames import configured_channels

    return configured_channels(project_root)


def not_loaded(name: str, why: str) -> None:
    """One line on stderr for a controller a host or `controller run` leaves out."""
    import click

    click.echo(f"wfrun: controller '{name}' is not loaded: {why}", err=True)
