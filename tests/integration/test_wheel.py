"""The wheel ships the built-in workflows, and an installed copy finds them.

Builds the wheel from this checkout, installs it into a bare folder, and runs
Python from a directory outside the repository with only that folder on
PYTHONPATH (the venv's interpreter supplies the third-party dependencies), so
the built-ins can only come from `runner/_builtin/definitions` in the wheel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# One worker builds the wheel once (module fixtures) under `--dist loadgroup`.
pytestmark = pytest.mark.xdist_group("wheel")

REPO = Path(__file__).resolve().parents[2]
BUILTINS = sorted(p.name for p in (REPO / "definitions").glob("*.yaml"))


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, f"{args}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--disable-pip-version-check", "--quiet", "-w", str(out), str(REPO)], cwd=out)
    wheels = list(out.glob("wfrun-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
          "--disable-pip-version-check", "--quiet", "--target", str(target), str(wheel)],
         cwd=target)
    return target


def _env(target: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WFRUN_", "PYTHON"))}
    env["PYTHONPATH"] = str(target)
    env["WFRUN_HOME"] = str(home)  # an empty user folder
    return env


def test_wheel_contains_every_builtin_definition(wheel: Path) -> None:
    assert BUILTINS, "definitions/ is empty"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        shipped = sorted(n.rsplit("/", 1)[1] for n in names
                         if n.startswith("runner/_builtin/definitions/") and n.endswith(".yaml"))
        assert shipped == BUILTINS
        for name in BUILTINS:
            data = zf.read(f"runner/_builtin/definitions/{name}")
            assert data == (REPO / "definitions" / name).read_bytes()
    assert "runner/compiler/_discovery.py" in names


def test_installed_wheel_lists_builtins_from_the_install_not_the_repo(
        installed: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    script = (
        "import json, runner\n"
        "from runner import build_catalog\n"
        "from runner.compiler._discovery import builtin_folder\n"
        "cat = build_catalog('workflows', None, None)\n"
        "print(json.dumps({'runner': runner.__file__,\n"
        "                  'folder': str(builtin_folder('workflows')),\n"
        "                  'entries': [[e.name, e.origin, str(e.path)] for e in cat.entries]}))\n"
    )
    proc = _run([sys.executable, "-c", script], cwd=outside,
                env=_env(installed, tmp_path / "home"))
    report = json.loads(proc.stdout)
    root = installed.resolve()
    assert Path(report["runner"]).resolve().is_relative_to(root)
    assert Path(report["folder"]).resolve() == root / "runner" / "_builtin" / "definitions"
    names = sorted(f"{name}.yaml" for name, _, _ in report["entries"])
    assert names == BUILTINS
    for _name, origin, path in report["entries"]:
        assert origin == "builtin"
        assert Path(path).resolve().is_relative_to(root)
        assert not Path(path).resolve().is_relative_to(REPO)


def test_installed_wheel_validates_its_builtins(installed: Path, tmp_path: Path) -> None:
    """Includes between built-ins (review -> repair) resolve inside the install too."""
    proc = _run([sys.executable, "-m", "runner", "validate", "--format", "json"],
                cwd=tmp_path, env=_env(installed, tmp_path / "home"))
    report = json.loads(proc.stdout)
    assert report["valid"] is True
    assert sorted(Path(f["path"]).name for f in report["files"]) == BUILTINS
    root = installed.resolve()
    for f in report["files"]:
        assert f["valid"]
        assert f["digest"].startswith("sha256:")
        assert Path(f["path"]).resolve().is_relative_to(root)


def test_wheel_marks_the_package_as_typed(wheel: Path, installed: Path) -> None:
    """PEP 561: without runner/py.typed, mypy ignores wfrun's annotations in user code."""
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("runner/py.typed") == b""
    assert (installed / "runner" / "py.typed").is_file()


def test_wheel_ships_the_ui_templates_and_static_assets(wheel: Path) -> None:
    """`wfrun ui` loads nothing from a CDN: every template, script and stylesheet is
    package data in the wheel."""
    ui = REPO / "runner" / "ui"
    expected = sorted(p.relative_to(REPO).as_posix()
                      for folder in ("templates", "static") for p in (ui / folder).iterdir())
    assert "runner/ui/static/ui.js" in expected
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert [n for n in expected if n not in names] == []
        for name in expected:
            assert zf.read(name) == (REPO / name).read_bytes()
        script = zf.read("runner/ui/static/ui.js").decode()
    assert "http://" not in script
    assert "https://" not in script
