"""Live step logs: a running attempt's output, masked, as it is printed (`logs --follow`).

While a shell action runs, each of its streams is appended to
`logs/<node>.<attempt>.<stream>` in the run bundle (0600 in a 0700 folder), made when
the stream first prints (a silent step makes no file). These files
are a convenience for followers, not a record: they are not fsync'd, and the durable
log stays the `node_log` event recorded when the attempt ends, after which the file is
removed. They obey the same rules as that event: the same byte bound, and secrets
masked before a byte reaches the disk.

Masking works on chunks as the pipe delivers them, so a secret split across two reads
must still be caught: up to len(longest secret) - 1 trailing characters stay unflushed
until the next chunk (or the end) shows whether they start a secret (only a tail that
is the beginning of some secret is held, so ordinary output is not delayed). stderr is also redacted
for credential-shaped text (`runner._safety.redact`), which needs whole lines, so it is
flushed up to its last line break (or once a line grows past `LINE_HOLD`).
"""

from __future__ import annotations

import codecs
import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

from runner._safety import bound, mask, redact, unsafe_tail

_utf8 = codecs.getincrementaldecoder("utf-8")

#: Which streams a live log has, in the order `logs` prints them.
STREAMS = ("stdout", "stderr")
#: A stderr line longer than this (characters) is flushed in pieces rather than held back
#: for ever; known secret values are still masked chunk-safely, but a credential-shaped
#: pattern split across two pieces may not be (the recorded event redacts it whole).
LINE_HOLD = 65_536


def live_log_name(node: str, attempt: str, stream: str, turn: int = 0) -> str:
    """The file name of one stream of one attempt, inside the bundle's `logs/` folder.
    `turn` counts the attempt's logs recorded before this one (a command agent logs each
    turn; a shell action has only turn 0). An included node's qualified id (`fix/verify`)
    is flattened with "+", which no node id contains: one flat folder, no subfolder to
    create per mount, and a name the reader can refuse if it holds a "/"."""
    flat = node.replace("/", "+")
    return f"{flat}.{attempt}.{stream}" if turn == 0 else f"{flat}.{attempt}-{turn}.{stream}"


class LiveStream:
    """One stream of one attempt: decoded, masked and bounded chunk by chunk."""

    def __init__(self, folder: Path, name: str, secrets: tuple[str, ...], *, cap_bytes: int,
                 cap_chars: int, lines: bool) -> None:
        # The path and the decoder are made when the stream first prints: most of a
        # map's items print nothing, and the two were half of a live log's cost.
        self._folder, self._name = folder, name
        self._path: Path | None = None
        self.secrets = secrets
        self.cap_bytes = cap_bytes
        self.cap_chars = cap_chars
        self.lines = lines  # stderr: pattern redaction, which needs whole lines
        self.pending = ""
        self.written_bytes = 0
        self.written_chars = 0
        self.decoder: codecs.IncrementalDecoder | None = None  # made at the first chunk
        self.lock = threading.Lock()
        # Made at the first byte to show: a step that prints nothing (most of a map's
        # items) costs no file, and a follower waits for the first line as before.
        self.fd: int | None = None
        self.made = False
        self.broken = False  # the file could not be written: the live view stops

    @property
    def path(self) -> Path:
        if self._path is None:
            self._path = self._folder / self._name
        return self._path

    def feed(self, chunk: bytes) -> None:
        """Called by the pipe's reader thread for each chunk it reads."""
        with self.lock:
            if self.decoder is None:
                self.decoder = _utf8(errors="replace")
            self._take(self.decoder.decode(chunk), final=False)

    def close(self) -> None:
        """End of stream: flush what was held back and close the file."""
        with self.lock:
            if self.decoder is not None:  # a stream that never got a byte holds none
                self._take(self.decoder.decode(b"", final=True), final=True)
            if self.fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self.fd)
                self.fd = None

    def _take(self, text: str, *, final: bool) -> None:
        masked = mask(self.pending + text, self.secrets) if self.secrets else self.pending + text
        cut = len(masked) if final else len(masked) - unsafe_tail(masked, self.secrets)
        if self.lines and not final:
            newline = masked.rfind("\n", 0, cut)
            if newline >= 0:
                cut = newline + 1
            elif cut < LINE_HOLD:
                cut = 0
        out, self.pending = masked[:cut], masked[cut:]
        if out:
            self._write(redact(out) if self.lines else out)

    def _write(self, text: str) -> None:
        if self.broken or self.written_chars >= self.cap_chars \
                or self.written_bytes >= self.cap_bytes:
            return  # past the bound: the rest is in the recorded log's truncation note
        text = text[: self.cap_chars - self.written_chars]
        data = bound(text, self.cap_bytes - self.written_bytes).encode(errors="replace")
        self.written_chars += len(text)
        self.written_bytes += len(data)
        try:
            if self.fd is None:
                self.made = True
                self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                                  | os.O_APPEND, 0o600)
            os.write(self.fd, data)
        except OSError:  # a full disk: the live view stops, the recorded log is the truth
            self.broken = True
            if self.fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self.fd)
            self.fd = None


class LiveLog:
    """Both streams of one running attempt; `remove` once its `node_log` is recorded."""

    def __init__(self, folder: Path, node: str, attempt: str, secrets: tuple[str, ...], *,
                 cap_bytes: int, cap_chars: int, turn: int = 0) -> None:
        self.stdout = LiveStream(folder, live_log_name(node, attempt, STREAMS[0], turn),
                                 secrets, cap_bytes=cap_bytes, cap_chars=cap_chars,
                                 lines=False)
        self.stderr = LiveStream(folder, live_log_name(node, attempt, STREAMS[1], turn),
                                 secrets, cap_bytes=cap_bytes, cap_chars=cap_chars,
                                 lines=True)

    @property
    def sinks(self) -> tuple[Callable[[bytes], None], Callable[[bytes], None]]:
        """What `procs.run_shell` / `run_group` call with each chunk they read."""
        return self.stdout.feed, self.stderr.feed

    def close(self) -> None:
        self.stdout.close()
        self.stderr.close()

    def remove(self) -> None:
        self.close()
        for stream in (self.stdout, self.stderr):
            if stream.made:  # a stream that printed nothing made no file
                with contextlib.suppress(OSError):
                    stream.path.unlink()
