"""The run page's live box masks the UI's own secrets even when the running step's
output splits one across two reads (runner/ui/_live.py LiveTail). The engine masks the
run's secrets before a byte reaches the live log; the page masks this process's too,
and did so per read, so a secret cut in two by the pipe reached the browser whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.engine import RunReader
from runner.engine._livelog import live_log_name
from runner.ui._live import LiveTail

SECRET = "ui-known-secret-7f3a"
RUN = "w-20260101T000000Z-0123abcd"


def ev(seq: int, etype: str, node: str | None = None, **payload: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"seq": seq, "type": etype, "at": f"2026-01-01T00:00:0{seq}Z",
                             "payload": payload}
    if node is not None:
        event["node"] = node
        event["attempt"] = "att2"
    return event


EVENTS = [ev(1, "run_started", workflow="w", input={}),
          ev(2, "node_started", "a", kind="action", retry=0)]


def _sent(tmp_path: Path, text: str, at: int) -> str:
    """What the page is sent of `text` printed in two reads, cut at `at`."""
    logs = tmp_path / str(at) / RUN / "logs"
    logs.mkdir(parents=True)
    log = logs / live_log_name("a", "att2", "stdout")
    tail = LiveTail(RunReader(tmp_path / str(at)), RUN, (SECRET,))
    data = text.encode()
    log.write_bytes(data[:at])
    messages = tail.poll(EVENTS, moved=True)
    log.write_bytes(data)
    messages += tail.poll(EVENTS, moved=False)
    assert messages[0] == {"node": "a", "attempt": "att2", "reset": True}
    return "".join(m.get("text", "") for m in messages if m.get("stream") == "stdout")


def test_a_secret_split_at_every_point_never_reaches_the_page(tmp_path: Path) -> None:
    text = f"token is {SECRET} ok\n"
    for at in range(1, len(text)):
        sent = _sent(tmp_path, text, at)
        assert SECRET not in sent, at
        assert sent == "token is *** ok\n", (at, sent)


def test_output_that_only_starts_like_a_secret_is_sent_once_it_cannot_be_one(
        tmp_path: Path) -> None:
    # "ui-known" could begin the secret: held while the read ends there, then sent.
    assert _sent(tmp_path, "ui-known things\n", len("x ui-known") - 2) == "ui-known things\n"
