"""Compiled definitions kept between processes (runner/compiler/_stored.py; issue 34
item 11): a hit only when nothing the definition was compiled from changed, and every
torn, foreign or crafted entry is a miss that compiles again.

Real files throughout: a project on disk, its catalog, the compiler, and real `wfrun`
processes for the end-to-end cases.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from runner.compiler import Compiler, WorkflowDefinition, _stored, build_catalog
from runner.compiler._stored import MAGIC, DefinitionCache, project_cache

CHILD = """\
start: say
nodes:
  say: {compute: "{{ {'word': 'WORD'} }}"}
exits:
  done: {from: say}
"""
PARENT = """\
start: kid
includes:
  kid: {workflow: child}
nodes:
  end: {compute: "{{ outputs.kid }}"}
edges:
  - {from: kid.done, to: end}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".wfrun" / "workflows").mkdir(parents=True)
    (root / ".wfrun" / "state").mkdir(mode=0o700)  # as the first run or start leaves it
    (root / ".wfrun" / "workflows" / "child.yaml").write_text(CHILD.replace("WORD", "one"))
    (root / ".wfrun" / "workflows" / "parent.yaml").write_text(PARENT)
    return root


def _cache(project: Path) -> DefinitionCache:
    cache = project_cache(build_catalog("workflows", project, None))
    assert cache is not None
    return cache


def _compile_and_keep(project: Path, name: str = "parent") -> WorkflowDefinition:
    cache = _cache(project)
    entry = cache.catalog.get(name)
    assert entry is not None
    result = Compiler(cache.catalog).compile_path(entry.path, origin=entry.origin)
    assert result.valid
    assert result.definition is not None
    cache.save(entry.path, entry.origin, result.definition)
    return result.definition


def _load(project: Path, name: str = "parent") -> WorkflowDefinition | None:
    cache = _cache(project)  # a fresh catalog and cache: as the next process sees them
    entry = cache.catalog.get(name)
    assert entry is not None
    return cache.load(entry.path, entry.origin)


def _entries(project: Path) -> list[Path]:
    return sorted((project / ".wfrun" / "state" / "compiled").glob("*.def"))


def test_a_kept_definition_is_read_back_whole_from_a_private_file(project: Path) -> None:
    compiled = _compile_and_keep(project)
    kept = _load(project)
    assert kept == compiled
    assert kept is not None
    assert kept.digest == compiled.digest
    folder = project / ".wfrun" / "state" / "compiled"
    assert folder.stat().st_mode & 0o777 == 0o700
    [entry] = _entries(project)
    assert entry.stat().st_mode & 0o777 == 0o600
    assert not list(folder.glob(".*.tmp"))  # written aside, then renamed


def test_nothing_kept_is_a_miss(project: Path) -> None:
    assert _load(project) is None


@pytest.mark.parametrize("edit", ["parent", "include", "touch-only"])
def test_a_changed_source_misses_and_bytes_not_mtimes_decide(project: Path,
                                                             edit: str) -> None:
    _compile_and_keep(project)
    workflows = project / ".wfrun" / "workflows"
    if edit == "parent":
        (workflows / "parent.yaml").write_text(PARENT + "title: changed\n")
        assert _load(project) is None
    elif edit == "include":
        (workflows / "child.yaml").write_text(CHILD.replace("WORD", "two"))
        assert _load(project) is None
    else:  # same bytes, new mtime: still the same definition
        os.utime(workflows / "child.yaml", ns=(1, 1))
        assert _load(project) is not None


def test_a_workflow_that_would_resolve_an_include_elsewhere_misses(project: Path,
                                                                    tmp_path: Path) -> None:
    _compile_and_keep(project)
    (project / ".wfrun" / "workflows" / "other.yaml").write_text(CHILD)
    assert _load(project) is None  # the catalog changed: the names may resolve elsewhere


def test_another_wfrun_code_misses(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compile_and_keep(project)
    monkeypatch.setattr(_stored, "code_stamp", lambda: "another build")
    assert _load(project) is None


def test_a_removed_notify_channel_misses(project: Path) -> None:
    (project / ".wfrun" / "workflows" / "tell.yaml").write_text(
        "start: say\nnodes:\n  say:\n    notify: {message: hi, channels: [ops]}\n")
    channels = {"ops"}
    cache = _cache(project)
    cache.catalog.channel_names = lambda: frozenset(channels)
    entry = cache.catalog.get("tell")
    assert entry is not None
    result = Compiler(cache.catalog).compile_path(entry.path, origin=entry.origin)
    assert result.valid, result.diagnostics
    assert result.definition is not None
    cache.save(entry.path, entry.origin, result.definition)
    again = _cache(project)
    again.catalog.channel_names = lambda: frozenset(channels)
    assert again.load(entry.path, entry.origin) is not None
    channels.clear()
    assert again.load(entry.path, entry.origin) is None


# --- torn, foreign and crafted entries: each a miss, never trusted -------------------


def _rewrite(entry: Path, data: bytes) -> None:
    entry.write_bytes(data)
    entry.chmod(0o600)


@pytest.mark.parametrize("damage", ["torn", "flipped", "empty", "garbage"])
def test_a_torn_or_corrupt_entry_misses_and_the_next_save_repairs_it(project: Path,
                                                                    damage: str) -> None:
    _compile_and_keep(project)
    [entry] = _entries(project)
    data = entry.read_bytes()
    damaged = {"torn": data[: len(data) // 2], "empty": b"", "garbage": os.urandom(300),
               "flipped": data[:-5] + bytes([data[-5] ^ 0xFF]) + data[-4:]}[damage]
    _rewrite(entry, damaged)
    assert _load(project) is None
    _compile_and_keep(project)
    assert _load(project) is not None


@pytest.mark.parametrize("loosen", ["file-readable", "folder-writable"])
def test_an_entry_others_could_have_written_is_not_read(project: Path, loosen: str) -> None:
    _compile_and_keep(project)
    [entry] = _entries(project)
    if loosen == "file-readable":
        entry.chmod(0o644)
    else:
        entry.parent.chmod(0o770)
    assert _load(project) is None


def test_a_linked_entry_is_not_followed(project: Path, tmp_path: Path) -> None:
    _compile_and_keep(project)
    [entry] = _entries(project)
    elsewhere = tmp_path / "elsewhere.def"
    elsewhere.write_bytes(entry.read_bytes())
    elsewhere.chmod(0o600)
    entry.unlink()
    entry.symlink_to(elsewhere)
    assert _load(project) is None


def test_a_well_formed_entry_naming_a_function_runs_nothing(project: Path,
                                                            tmp_path: Path) -> None:
    """A crafted pickle with a valid header and metadata: its `os.system` call is
    refused by the unpickler, so the marker file never appears."""
    _compile_and_keep(project)
    [entry] = _entries(project)
    data = entry.read_bytes()
    rest = data[len(MAGIC) + 65:]
    meta_line = rest.split(b"\n", 1)[0]
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return os.system, (f"touch {marker}",)

    payload = pickle.dumps(Evil(), protocol=5)
    crafted = meta_line + b"\n" + payload
    _rewrite(entry, MAGIC + hashlib.sha256(crafted).hexdigest().encode() + b"\n" + crafted)
    assert _load(project) is None
    assert not marker.exists()


def test_an_entry_whose_digest_does_not_match_its_snapshot_misses(project: Path) -> None:
    compiled = _compile_and_keep(project)
    [entry] = _entries(project)
    data = entry.read_bytes()
    meta_line, _ = data[len(MAGIC) + 65:].split(b"\n", 1)
    meta = json.loads(meta_line)
    from dataclasses import replace

    forged = replace(compiled, max_steps=compiled.max_steps + 1)  # digest left as it was
    rest = json.dumps(meta).encode() + b"\n" + pickle.dumps(forged, protocol=5)
    _rewrite(entry, MAGIC + hashlib.sha256(rest).hexdigest().encode() + b"\n" + rest)
    assert _load(project) is None


# --- real processes ------------------------------------------------------------------


def _wfrun(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WFRUN_")}
    env["WFRUN_HOME"] = str(project.parent / "home")
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_run_sees_an_edited_include_and_list_reads_what_run_kept(project: Path) -> None:
    first = _wfrun(project, "run", "parent", "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["final_output"]["output"] == {"word": "one"}
    assert len(_entries(project)) == 1  # kept by the run
    listed = _wfrun(project, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    digests = {w["name"]: w["digest"] for w in json.loads(listed.stdout)["workflows"]}
    assert digests["parent"] == _load(project).digest  # type: ignore[union-attr]
    (project / ".wfrun" / "workflows" / "child.yaml").write_text(CHILD.replace("WORD", "two"))
    second = _wfrun(project, "run", "parent", "--json")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["final_output"]["output"] == {"word": "two"}
    (project / ".wfrun" / "workflows" / "child.yaml").write_text("start: nowhere\n")
    broken = _wfrun(project, "run", "parent", "--json")
    assert broken.returncode != 0  # validation still runs on changed sources
    assert "child" in broken.stderr


def test_a_fan_out_definition_is_read_back_by_a_fresh_process(project: Path) -> None:
    """A kept map/parallel definition names classes of modules a fresh process has not
    loaded yet: the unpickler loads them (runner.compiler only) rather than missing."""
    workflows = project / ".wfrun" / "workflows"
    fanout = Path(__file__).resolve().parents[3] / "fixtures" / "definitions" / "valid"
    (workflows / "fan.yaml").write_text((fanout / "fanout.yaml").read_text())
    (workflows / "style-review.yaml").write_text(CHILD.replace("WORD", "style"))
    compiled = _compile_and_keep(project, "fan")
    code = ("import json, sys\n"
            "from pathlib import Path\nfrom runner.compiler import build_catalog\n"
            "from runner.compiler._stored import project_cache\n"
            f"cache = project_cache(build_catalog('workflows', Path({str(project)!r}), None))\n"
            "entry = cache.catalog.get('fan')\n"
            "kept = cache.load(entry.path, entry.origin)\n"
            "print(json.dumps(kept.digest if kept else None))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert json.loads(out.stdout) == compiled.digest


def test_damaged_payloads_with_a_matching_header_are_misses_never_errors(
        project: Path) -> None:
    """The header's sha256 catches a torn file; past it, whatever the unpickler meets
    (a flipped byte anywhere in the payload, resealed: only this user could write
    that) is a miss or a whole definition with the same digest, never an exception."""
    compiled = _compile_and_keep(project)
    [entry] = _entries(project)
    data = entry.read_bytes()
    meta_line, payload = data[len(MAGIC) + 65:].split(b"\n", 1)
    for at in range(0, len(payload), max(1, len(payload) // 97)):
        for flip in (0x01, 0x80, 0xFF):
            damaged = payload[:at] + bytes([payload[at] ^ flip]) + payload[at + 1:]
            rest = meta_line + b"\n" + damaged
            _rewrite(entry, MAGIC + hashlib.sha256(rest).hexdigest().encode() + b"\n" + rest)
            kept = _load(project)
            if kept is not None:
                assert kept.digest == compiled.digest, (at, flip)
                assert _stored._whole(kept), (at, flip)
                assert kept.nodes.keys() == compiled.nodes.keys(), (at, flip)


def test_list_keeps_nothing_in_a_project_that_never_ran_and_the_first_run_does(
        project: Path) -> None:
    """`list` in a fresh checkout reads; it does not create `.wfrun/state/`. A run
    writes the store there anyway, so its compile is kept at once."""
    (project / ".wfrun" / "state").rmdir()
    listed = _wfrun(project, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {w["name"] for w in json.loads(listed.stdout)["workflows"]} >= {"parent", "child"}
    assert not (project / ".wfrun" / "state").exists()
    ran = _wfrun(project, "run", "parent", "--json")
    assert ran.returncode == 0, ran.stderr
    assert len(_entries(project)) == 1
