"""The wheel ships the Pi extension, and an installed wfrun points Pi at its own copy."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from test_wheel import REPO, _env
from test_wheel import installed as installed
from test_wheel import wheel as wheel

EXTENSION = "runner/integrations/pi/index.ts"


def test_wheel_ships_the_pi_extension(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read(EXTENSION) == (REPO / EXTENSION).read_bytes()


def test_installed_integrate_pi_path_is_inside_the_install(installed: Path,
                                                           tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "runner", "integrate", "pi", "--path"],
                          cwd=tmp_path, env=_env(installed, tmp_path / "home"),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip()).resolve()
    assert path == (installed / EXTENSION).resolve()
    assert path.read_bytes() == (REPO / EXTENSION).read_bytes()
