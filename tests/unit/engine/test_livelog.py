"""Live logs (engine/_livelog.py): masked chunk by chunk, bounded, private files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from runner._safety import mask_values
from runner.engine._livelog import LiveLog, LiveStream

SECRET = "tok-ABCD-9f"


def _stream(tmp_path: Path, *, lines: bool = False, cap: int = 10_000) -> LiveStream:
    return LiveStream(tmp_path, "s", mask_values([SECRET]), cap_bytes=cap, cap_chars=cap,
                      lines=lines)


def test_a_secret_split_at_every_point_across_two_reads_is_masked(tmp_path: Path) -> None:
    text = f"before {SECRET} after\n".encode()
    for at in range(1, len(text)):
        s = _stream(tmp_path)
        s.feed(text[:at])
        s.feed(text[at:])
        s.close()
        written = (tmp_path / "s").read_text()
        assert written == "before *** after\n", at


def test_only_a_tail_that_could_begin_a_secret_waits(tmp_path: Path) -> None:
    s = _stream(tmp_path)
    s.feed(b"first-line\ntok-AB")
    # The line is on disk at once; the possible start of the secret is not.
    assert (tmp_path / "s").read_text() == "first-line\n"
    s.feed(b"CD-9f\n")
    assert (tmp_path / "s").read_text() == "first-line\n***\n"
    s.feed(b"tok-AB")  # a prefix that never completes is shown at the end
    s.close()
    assert (tmp_path / "s").read_text() == "first-line\n***\ntok-AB"


def test_stderr_is_redacted_by_whole_lines(tmp_path: Path) -> None:
    s = _stream(tmp_path, lines=True)
    key = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2"
    s.feed(f"OPENAI_API_KEY={key[:8]}".encode())
    assert not (tmp_path / "s").exists()  # no line break yet: nothing is judged (or made)
    s.feed(f"{key[8:]}\nnext\n".encode())
    s.close()
    written = (tmp_path / "s").read_text()
    assert key not in written
    assert key[8:] not in written
    assert written.endswith("next\n")


def test_a_character_split_across_reads_and_the_bound(tmp_path: Path) -> None:
    s = _stream(tmp_path, cap=8)
    data = "é" * 10
    raw = data.encode()
    s.feed(raw[:3])
    s.feed(raw[3:])
    s.close()
    written = (tmp_path / "s").read_bytes()
    assert len(written) <= 8
    assert written.decode().startswith("é")  # never half a character


def test_files_are_private_and_removed_once_recorded(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir(mode=0o700)
    log = LiveLog(folder, "build", "a1b2", (), cap_bytes=100, cap_chars=100)
    log.stdout.feed(b"out\n")
    log.close()
    path = folder / "build.a1b2.stdout"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_text() == "out\n"
    log.remove()
    assert not path.exists()
    assert not (folder / "build.a1b2.stderr").exists()


def test_a_silent_step_makes_no_file(tmp_path: Path) -> None:
    """Most of a map's items print nothing: their live log costs no file (a follower
    waits for the first line as it would for a step not started), and one that prints
    gets its file at the first byte, removed with the log."""
    live = LiveLog(tmp_path, "each[3]", "a1", (), cap_bytes=100, cap_chars=100)
    live.close()
    assert os.listdir(tmp_path) == []
    live.remove()
    chatty = LiveLog(tmp_path, "each[4]", "a2", (), cap_bytes=100, cap_chars=100)
    chatty.stderr.feed(b"warn\n")
    assert os.listdir(tmp_path) == ["each[4].a2.stderr"]
    assert (tmp_path / "each[4].a2.stderr").read_text() == "warn\n"
    chatty.remove()
    assert os.listdir(tmp_path) == []


def test_a_character_cut_at_the_end_is_flushed_when_the_stream_closes(tmp_path: Path) -> None:
    """The decoder is made at the first chunk; what it holds at the end (the first byte
    of a character the step never finished) is written at close, as a replacement."""
    s = _stream(tmp_path)
    s.feed(b"ok \xc3")
    assert (tmp_path / "s").read_bytes() == b"ok "
    s.close()
    assert (tmp_path / "s").read_text() == "ok \ufffd"
