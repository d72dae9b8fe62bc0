"""The wfrun-owned session log of MCP sessions: durable, private, crash-tolerant."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from runner.host.mcp._sessionlog import SessionLog, SessionLogError, log_path, valid_session_id


def test_messages_are_pending_until_marked_delivered(tmp_path: Path) -> None:
    log = SessionLog.for_session(tmp_path / ".wfrun", "claude-code:abc-1")
    first = log.append_message("wfrun-deferred-turn", "failed to start", {"turnIntentId": "i1"},
                               deliver_as="follow_up", trigger_turn=True)
    second = log.append_message("wfrun-notification", "progress", {"notificationId": "n1"},
                                deliver_as="next_turn", trigger_turn=False)
    assert (first, second) == ("m1", "m2")
    assert [(m.id, m.trigger_turn, m.delivered) for m in log.pending()] == [
        ("m1", True, False), ("m2", False, False)]
    log.mark_delivered([first], "stop-hook")
    assert [m.id for m in log.pending()] == ["m2"]
    # A fresh reader (another process) sees the same durable state.
    again = SessionLog.for_session(tmp_path / ".wfrun", "claude-code:abc-1")
    assert [(m.id, m.delivered, m.details) for m in again.messages()] == [
        ("m1", True, {"turnIntentId": "i1"}), ("m2", False, {"notificationId": "n1"})]


def test_file_is_private_in_private_folders(tmp_path: Path) -> None:
    log = SessionLog.for_session(tmp_path / ".wfrun", "s1")
    log.append_message("t", "x", {}, deliver_as="follow_up", trigger_turn=True)
    assert stat.S_IMODE(os.stat(log.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(log.path)).st_mode) == 0o700


def test_a_torn_last_line_is_skipped_and_terminated_before_the_next_append(
        tmp_path: Path) -> None:
    log = SessionLog.for_session(tmp_path / ".wfrun", "s1")
    log.append_message("t", "kept", {}, deliver_as="follow_up", trigger_turn=True)
    with open(log.path, "ab") as fh:
        fh.write(b'{"kind": "message", "id": "m2", "content": "half')  # a crash mid-write
    assert [m.content for m in log.messages()] == ["kept"]
    log.append_message("t", "after", {}, deliver_as="follow_up", trigger_turn=True)
    assert [(m.id, m.content) for m in log.messages()] == [("m1", "kept"), ("m2", "after")]


def test_two_writers_never_mint_the_same_id(tmp_path: Path) -> None:
    path = log_path(tmp_path / ".wfrun", "s1")
    ids: list[str] = []
    lock = threading.Lock()

    def write(n: int) -> None:
        log = SessionLog(path)  # each its own handle, like two processes
        for i in range(20):
            got = log.append_message("t", f"{n}-{i}", {}, deliver_as="follow_up",
                                     trigger_turn=False)
            with lock:
                ids.append(got)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(ids, key=lambda i: int(i[1:])) == [f"m{i}" for i in range(1, 61)]
    assert len(SessionLog(path).messages()) == 60


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".hidden", "x" * 129, "sp ace"])
def test_unusable_session_ids_are_refused(tmp_path: Path, bad: str) -> None:
    assert not valid_session_id(bad)
    with pytest.raises(SessionLogError, match="not usable as a log name"):
        SessionLog.for_session(tmp_path, bad)


def test_a_symlinked_log_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / ".wfrun" / "state").mkdir(parents=True)
    (tmp_path / ".wfrun" / "state" / "mcp-sessions").symlink_to(tmp_path / "elsewhere")
    log = SessionLog.for_session(tmp_path / ".wfrun", "s1")
    with pytest.raises(SessionLogError, match="not a private folder"):
        log.append_message("t", "x", {}, deliver_as="follow_up", trigger_turn=True)
