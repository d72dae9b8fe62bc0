"""The local runtime: what a foreground `wfrun run` needs, as plain functions.

It ties the catalog (compiler) to the engine: where runs live, how a run's
workflow is found again for resume and answer, and which agent executor a
`--agent` spec names. The CLI parses arguments, calls one of these, renders.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner import _jsonin as jsonin
from runner.clock import Clock, SystemClock
from runner.compiler._discovery import PROJECT_DIR
from runner.errors import InputError, NotFoundError, OperationFailed, WfrunError
from runner.host.runtime._channelnames import with_channels
from runner.host.runtime._storeconfig import StoreChoice, choose_store

if TYPE_CHECKING:
    # Loaded where they are used: `wfrun status` and `runs` build a Workspace but never
    # compile or run, and must not pay for the compiler's checks or the engine (issue 15).
    from runner.compiler import Catalog, WorkflowDefinition
    from runner.compiler._workflows import Workflows
    from runner.engine import AgentStepExecutor, RunReader
    from runner.engine._rows import BundleRows
    from runner.engine._runtypes import CrashPoint
    from runner.store import ProjectStore as ProjectStore
    from runner.store import SqliteStore, Store
    from runner.store._controller_interface import ControllerStore

CRASH_ENV = "WFRUN_CRASH_AT"
AGENT_ENV = "WFRUN_AGENT_ENV"  # secret variables a command: agent may inherit


def crash_injector(spec: str | None) -> CrashPoint | None:
    """A test seam: `WFRUN_CRASH_AT=<point>[:<n>]` SIGKILLs this process the n-th time
    (default 1st) the engine passes `point` (one of `runner.engine._runner.CRASH_POINTS`).

    Read once, here at the host edge; the engine only calls the callable it is given.
    """
    if not spec:
        return None
    from runner.engine._runtypes import CRASH_POINTS
    from runner.launch._coordinator import CRASH_POINTS as LAUNCH_POINTS

    points = (*CRASH_POINTS, *LAUNCH_POINTS)
    point, _, count = spec.partition(":")
    if point not in points or (count and not count.isdigit()) or count == "0":
        raise InputError(f"{CRASH_ENV}='{spec}' is not <point>[:<n>] with a point in "
                         f"{', '.join(points)}")
    target = int(count or 1)
    seen = 0

    def crash(name: str) -> None:
        nonlocal seen
        if name == point:
            seen += 1
            if seen == target:
                os.kill(os.getpid(), signal.SIGKILL)

    return crash


@dataclass
class Workspace:
    """Where definitions come from and where runs are written."""

    catalog: Catalog
    project_root: Path | None
    state_dir: Path  # used for runs when there is no project
    clock: Clock = field(default_factory=SystemClock)
    crash_point: CrashPoint | None = field(
        default_factory=lambda: crash_injector(os.environ.get(CRASH_ENV)))
    store_flag: str | None = None  # `--store`; else WFRUN_STORE, config.yaml, SQLite
    _workflows: Workflows | None = field(default=None, init=False, repr=False,
                                         compare=False)
    _rows_store: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        with_channels(self.catalog)  # a notify channel is checked against config.yaml

    @property
    def runs_dir(self) -> Path:
        if self.project_root is not None:
            return self.project_root / PROJECT_DIR / "runs"
        return self.state_dir / "runs"

    def bundle_rows(self, store: Store | ControllerStore | None = None) -> BundleRows | None:
        """Where run bundles live: the store's database on Postgres (every host on it
        can then resume a run), None on SQLite (folders under `runs_dir`). `store`: an
        open store to take them from; else the chosen store is opened once, here."""
        if store is not None:
            rows: BundleRows | None = getattr(store, "bundles", None)
            return rows
        if self._rows_store is None:
            if store_choice(self).url is None:
                return None
            self._rows_store = open_store(self)  # kept open for this process's life
        rows = getattr(self._rows_store, "bundles", None)
        return rows

    def reader(self, store: Store | None = None) -> RunReader:
        """Read-only access to this workspace's runs, folders or rows."""
        from runner.engine._reader import RunReader

        return RunReader(self.runs_dir, self.bundle_rows(store))

    # -- definitions ---------------------------------------------------------------
    @property
    def workflows(self) -> Workflows:
        """The workflows as this process compiles them (compiler/_workflows.py): the
        resolver of every runner built here, so none calls back up into the workspace."""
        if self._workflows is None:
            from runner.compiler._stored import FOLDER
            from runner.compiler._workflows import Workflows

            self._workflows = Workflows(self.catalog, store_path(self).parent / FOLDER,
                                        project_root=self.project_root,
                                        base=self.project_root or self.state_dir)
        return self._workflows

    def compile(self, ref: str) -> tuple[WorkflowDefinition, str]:
        """Compile a workflow by name or path; returns it with the ref to store (cached
        while its files hash the same: `Workflows.compile`)."""
        definition, stored = self.workflows.compile(ref)
        self.catalog = self.workflows.catalog
        return definition, stored

    def definitions(self) -> Catalog:
        """The workflow catalog as the folders hold it now (re-scanned only when a source
        folder changed; the same object otherwise, so the compile cache stays valid)."""
        self.catalog = self.workflows.current()
        return self.catalog

    def session_ref(self, ref: str) -> str:
        """`ref` as an agent session may use it (`Workflows.session_ref`)."""
        return self.workflows.session_ref(ref)

    def resolver(self, manifest: dict[str, Any]) -> WorkflowDefinition:
        ref = str(manifest.get("workflow_ref") or manifest.get("workflow") or "")
        definition, _ = self.compile(ref)
        return definition

    @property
    def children_dir(self) -> Path:
        """Where runners record their shell process groups, one file per process."""
        return self.runs_dir.parent / "state" / "children"


def _read_text(path: str, what: str) -> str:
    """A file named on the command line (`@FILE`), or stdin for `-`, as text."""
    import sys

    if path == "-":
        return sys.stdin.read()
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as fh:
            return fh.read()
    except UnicodeDecodeError:
        raise InputError(f"{what}: '{path}' is not UTF-8 text") from None
    except OSError as exc:
        raise InputError(f"{what}: cannot read '{path}': {exc.strerror}") from None


def parse_input(json_text: str | None, pairs: tuple[str, ...],
                schema: Mapping[str, Any] | None = None) -> Any:
    """`--input JSON|@FILE|-` and/or `-i key=value|key=@FILE`.

    `--input` is always JSON (`@FILE` reads it from a file, `-` from stdin). A `-i`
    value is a string (`version=1.10` stays "1.10") unless the workflow's input
    schema declares that field another type: then it is read as JSON, so
    `times=3` is 3 for an integer field. `key=@FILE` takes the file's text;
    `key=@@x` is the literal string "@x".
    """
    value: Any = {}
    if json_text is not None:
        source = "--input"
        if json_text == "-" or json_text.startswith("@"):
            name = json_text if json_text == "-" else json_text[1:]
            source = f"--input {'(stdin)' if name == '-' else json_text}"
            json_text = _read_text(name, "--input")
        try:
            value = jsonin.loads(json_text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{source} is not valid JSON: {exc.msg} at line {exc.lineno} "
                             f"column {exc.colno}") from None
    props = (schema or {}).get("properties") or {}
    for pair in pairs:
        if "=" not in pair:
            raise InputError(f"-i takes key=value, got '{pair}'")
        if not isinstance(value, dict):
            raise InputError("-i key=value needs --input to be a JSON object")
        key, raw = pair.split("=", 1)
        if raw.startswith("@@"):
            raw = raw[1:]
        elif raw.startswith("@") and len(raw) > 1:
            raw = _read_text(raw[1:], f"-i {key}=@FILE")
        declared = props.get(key, {}).get("type") if isinstance(props.get(key), dict) else None
        types = set(declared) if isinstance(declared, list) else {declared}
        if not types - {None, "string"}:
            value[key] = raw  # a string field, or no declared type: the text as given
            continue
        try:
            value[key] = jsonin.loads(raw)
        except ValueError:
            value[key] = raw  # the schema check names the field and the type it wants
    return value


def parse_answer(text: str | None) -> Any:
    """An answer is JSON when it parses, else the text itself."""
    if text is None:
        return None
    try:
        return jsonin.loads(text)
    except ValueError:
        return text


def make_executor(spec: str | None, clock: Clock | None = None,
                  openai_settings: dict[str, str] | None = None) -> AgentStepExecutor | None:
    """`scripted:FILE`, `command:'CMD ARGS'` or `openai`.

    The openai agent takes its base URL, key and model from `openai_settings`
    (the CLI flags) first, then from WFRUN_OPENAI_BASE_URL, _API_KEY and _MODEL.
    """
    if not spec:
        return None
    kind, _, arg = spec.partition(":")
    if kind == "scripted":
        from runner.engine.executors._scripted import ScriptedExecutor

        if not arg:
            raise InputError("--agent scripted:FILE needs a file of canned outputs")
        return ScriptedExecutor.from_file(Path(arg).expanduser())
    if kind == "command":
        import importlib

        command: Any = importlib.import_module("runner.engine.executors._command")
        try:
            argv = shlex.split(arg)
        except ValueError as exc:
            raise InputError(f"--agent command: cannot split '{arg}': {exc}") from None
        if not argv:
            raise InputError("--agent command:'CMD' needs a command")
        # Secret variables are withheld from the agent; WFRUN_AGENT_ENV names those its
        # CLI needs itself (e.g. ANTHROPIC_API_KEY), comma-separated.
        passed = [n.strip() for n in os.environ.get(AGENT_ENV, "").split(",") if n.strip()]
        executor: AgentStepExecutor = command.CommandExecutor(argv, pass_env=passed)
        return executor
    if kind == "openai":
        import importlib

        openai: Any = importlib.import_module("runner.engine.executors._openai")
        environ = dict(os.environ)
        environ.update({k: v for k, v in (openai_settings or {}).items() if v})
        chat: AgentStepExecutor = openai.OpenAIExecutor.from_env(environ)
        return chat
    raise InputError(f"unknown agent '{spec}'; use scripted:FILE, command:'CMD' or openai")


def store_exists(ws: Workspace) -> bool:
    """Whether the store is there to read: a Postgres store always is (its tables are
    created on first open); the SQLite file once the first start made it."""
    return store_choice(ws).url is not None or store_path(ws).exists()


def store_path(ws: Workspace) -> Path:
    """`.wfrun/state/store.sqlite3` in the project (or the user state folder)."""
    base = ws.project_root / PROJECT_DIR if ws.project_root is not None else ws.state_dir
    return base / "state" / "store.sqlite3"


def reset_store(ws: Workspace) -> Path | str:
    """`wfrun store reset --yes`: delete and recreate the store; bundles are kept.
    Returns the SQLite path, or the Postgres URL with its password masked."""
    from runner.store import SqliteStore, StoreError

    choice = store_choice(ws)
    try:
        if choice.url is not None:
            from runner.store.postgres import PostgresStore

            PostgresStore.reset(choice.url).close()
            return choice.shown
        path = store_path(ws)
        SqliteStore.reset(path).close()
    except StoreError as exc:
        from runner.errors import OperationFailed

        raise OperationFailed(exc.message) from None
    return path


def store_choice(ws: Workspace) -> StoreChoice:
    """The store in force for `ws` (runner/host/runtime/_storeconfig.py)."""
    return choose_store(ws.store_flag, ws.project_root)


def check_store(ws: Workspace) -> dict[str, Any]:
    """`wfrun store check`: the layout (on open) and every page and index (SQLite's
    quick_check), read-only; a damaged store is one error line, never reset advice."""
    from runner.store import LaunchBook, StoreError
    from runner.store import _faults as faults

    choice = store_choice(ws)
    if choice.url is not None:
        return _check_postgres(ws, choice)
    from runner.store.sqlite._files import sidecar_paths

    path = store_path(ws)
    try:
        absent = not path.exists() and not any(p.exists() for p in sidecar_paths(path))
    except OSError:
        absent = False  # its folder cannot be looked into: the open says so, in one line
    if absent:
        raise NotFoundError(f"no store at {path} yet; it is created on the first start")
    # A leftover -wal without its store file is refused by the open, as by every
    # other command (it may hold commits), never reported as "no store yet".
    store = _open_sqlite(ws, read_only=True)
    try:
        problems = store.integrity_problems()
        if problems:
            detail = f"{len(problems)} problem(s), first: {problems[0]}"
            raise faults.corrupt(path, detail)
        counts = LaunchBook(store).counts()  # counted in SQL, not a row object per launch
        launches = {status: counts.get(status, 0) for status in (
            "queued", "starting", "running", "parked", "done", "failed", "cancelled")}
    except StoreError as exc:
        raise _store_error(exc, path) from None
    finally:
        store.close()
    return {"path": str(path), "schema": store.schema_id, "ok": True, "launches": launches}


def open_store(ws: Workspace, *, read_only: bool = False) -> ProjectStore:
    """Open the project's store, mapping store errors onto the CLI's error classes.

    `read_only` (the views: status, why, store check) reads an existing store without
    creating, setting up or tightening anything, so it works in a read-only project;
    with no store yet it opens (creates) one as every other command does."""
    choice = store_choice(ws)
    if choice.url is not None:
        return _open_postgres(choice)
    return _open_sqlite(ws, read_only=read_only)


def _open_sqlite(ws: Workspace, *, read_only: bool) -> SqliteStore:
    from runner.store import SqliteStore, StoreError

    path = store_path(ws)
    try:
        if read_only and path.is_file() and path.stat().st_size > 0:
            return SqliteStore(path, clock=ws.clock, read_only=True)
        return SqliteStore(path, clock=ws.clock)
    except (StoreError, OSError) as exc:
        # Chained to the store's own error, so a caller can tell a damaged store.
        raise _store_error(exc, path) from exc


def _open_postgres(choice: StoreChoice) -> ProjectStore:
    """The Postgres store the choice names (leases on the database clock)."""
    from runner.store import StoreError

    assert choice.url is not None
    try:
        from runner.store.postgres import PostgresStore
    except ImportError:
        raise InputError(f"{choice.origin} names a Postgres store but psycopg is not "
                         "installed; install wfrun[postgres]") from None
    try:
        return PostgresStore(choice.url)
    except StoreError as exc:
        from runner.host.runtime._errors import translate

        raise translate(exc) or OperationFailed(exc.message) from None


def _check_postgres(ws: Workspace, choice: StoreChoice) -> dict[str, Any]:
    """`wfrun store check` on Postgres: the layout check (on open) and the counts."""
    from runner.store import LaunchBook, StoreError

    store = _open_postgres(choice)
    try:
        counts = LaunchBook(store).counts()
    except StoreError as exc:
        from runner.host.runtime._errors import translate

        raise translate(exc) or OperationFailed(exc.message) from None
    finally:
        store.close()
    launches = {status: counts.get(status, 0) for status in (
        "queued", "starting", "running", "parked", "done", "failed", "cancelled")}
    return {"path": choice.shown, "schema": store.schema_id, "ok": True, "launches": launches}


def _store_error(exc: BaseException, path: Path) -> WfrunError:
    from runner.host.runtime._errors import translate
    from runner.store import _faults as faults

    if isinstance(exc, OSError):
        exc = faults.from_os(exc, path, "open")
    return translate(exc) or OperationFailed(str(exc))
