"""A folder bundle's new files are written whole or not at all, on a real nearly full
disk (a small tmpfs, tests/machinefaults.py): the first write comes back short, the
rest is refused (ENOSPC), and the half-written file is removed."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import machinefaults as mf
import pytest

from runner.engine._bundle import create_private

pytestmark = pytest.mark.timeout(60)


def test_a_new_file_that_does_not_fit_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    with mf.tmpfs(tmp_path / "disk", "1m") as disk:
        filler = mf.fill(disk)
        os.truncate(filler, filler.stat().st_size - 4 * mf.PAGE)  # 4 pages left
        data = b"x" * (16 * mf.PAGE)
        fd = os.open(disk / "probe", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            assert 0 < os.write(fd, data) < len(data)  # the disk writes short first
        finally:
            os.close(fd)
        os.unlink(disk / "probe")
        with pytest.raises(OSError, match="No space left") as refused:
            create_private(disk / "trace.jsonl", data, sync=True, mode=0o400)
        assert refused.value.errno == errno.ENOSPC
        assert not (disk / "trace.jsonl").exists()
        # What fits is written whole, born read-only.
        create_private(disk / "state.json", data[:mf.PAGE], mode=0o400)
        assert (disk / "state.json").read_bytes() == data[:mf.PAGE]
        assert (disk / "state.json").stat().st_mode & 0o777 == 0o400
