"""Which store a command uses: `--store`, then `WFRUN_STORE`, then `store:` in
`.wfrun/config.yaml`, else the embedded SQLite file (zero set-up).

A value is `sqlite` (the default, said explicitly) or a `postgresql://` URL. A
password in the URL is never printed: every message and view shows the URL with
`***` in its place (libpq's PGPASSWORD and ~/.pgpass keep it out of the URL).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.compiler._discovery import PROJECT_DIR
from runner.errors import InputError
from runner.store._urls import is_postgres_url, mask_url

STORE_ENV = "WFRUN_STORE"
CONFIG_FILE = "config.yaml"
_CONFIG_MAX_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class StoreChoice:
    url: str | None  # None: the SQLite file
    origin: str  # where the choice came from, for messages

    @property
    def shown(self) -> str:
        return "sqlite" if self.url is None else mask_url(self.url)


def _parse(value: object, origin: str) -> StoreChoice:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{origin}: the store must be 'sqlite' or a postgresql:// URL")
    text = value.strip()
    if text == "sqlite":
        return StoreChoice(None, origin)
    if is_postgres_url(text):
        return StoreChoice(text, origin)
    shown = mask_url(text) if "://" in text else "that value"
    raise InputError(f"{origin}: {shown} is not a store; use 'sqlite' or a "
                     "postgresql://USER@HOST/DB URL")


def load_config(project_root: Path) -> Mapping[str, object]:
    """`.wfrun/config.yaml` as a mapping ({} when there is none)."""
    path = project_root / PROJECT_DIR / CONFIG_FILE
    origin = f"{PROJECT_DIR}/{CONFIG_FILE}"
    try:
        raw = path.read_bytes()[: _CONFIG_MAX_BYTES + 1]
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise InputError(f"{origin} cannot be read: {exc.strerror}") from None
    if len(raw) > _CONFIG_MAX_BYTES:
        raise InputError(f"{origin} is over {_CONFIG_MAX_BYTES // 1024} KiB")
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe", pure=True).load(raw.decode("utf-8"))
    except (YAMLError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "not YAML"
        raise InputError(f"{origin} is not valid YAML ({first})") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InputError(f"{origin} must be a mapping (for example `store: sqlite`)")
    return data


def _from_config(project_root: Path) -> StoreChoice | None:
    data = load_config(project_root)
    if "store" not in data:
        return None
    return _parse(data["store"], f"{PROJECT_DIR}/{CONFIG_FILE} store")


def choose_store(flag: str | None, project_root: Path | None,
                 environ: Mapping[str, str] | None = None) -> StoreChoice:
    """The store in force (see the module doc for the order)."""
    env = os.environ if environ is None else environ
    if flag is not None:
        return _parse(flag, "--store")
    if env.get(STORE_ENV):
        return _parse(env[STORE_ENV], STORE_ENV)
    if project_root is not None:
        configured = _from_config(project_root)
        if configured is not None:
            return configured
    return StoreChoice(None, "default")
