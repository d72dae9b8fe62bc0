"""How a Claude Code hook reaches the `wfrun mcp` server of the same Claude process.

Claude Code starts the MCP server once per process (its parent pid is the Claude
process) and runs every hook as a new short-lived process with `CLAUDE_PID` set
to that same pid. So the server listens on a Unix socket named after its parent
pid, and a hook connects to the socket named after `CLAUDE_PID`: no registry, no
guessing, and two Claude processes in one project never meet. The session itself
is named by Claude's `session_id` (the server reads `CLAUDE_CODE_SESSION_ID` at
start; every hook message carries the id, so a `/clear` rebinds the server).

The socket lives in a private 0700 folder under the temp dir, or under /tmp when
`$TMPDIR` is too long for a socket address (~100 bytes; socket_path). One request line, one reply
line, then the connection closes. A stale socket of a dead process refuses the
connection, which the hook treats as "no server". Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket

from runner import _jsonin as jsonin

TYPE_CHECKING = False  # no typing, pathlib or tempfile at run time (hook latency)
if TYPE_CHECKING:
    from typing import Any

PROTOCOL = 1
#: The settle reply waits a few seconds for a just-activated run (server.py's
#: SETTLE_TIMEOUT); a hook must still answer Claude Code soon if the server is wedged.
REPLY_TIMEOUT = 15.0


class ChannelError(Exception):
    """The server could not be reached or answered badly."""


#: The longest socket path to use: `sun_path` holds 108 bytes on Linux and 104 on
#: macOS, each with its terminating NUL; a little under both.
MAX_SOCKET_PATH = 100


def _private_dir(base: str) -> str:
    import stat

    path = os.path.join(base, f"wfrun-{os.getuid()}")
    if not os.path.lexists(path):
        with contextlib.suppress(FileExistsError):  # another hook made it just now
            os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ChannelError(f"{path} is not a private folder of this user")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def socket_path(claude_pid: int) -> str:
    """The socket of Claude process `claude_pid`, the same for the server and a hook
    (both inherit Claude's environment): in `$TMPDIR/wfrun-UID/` when that path fits
    in a socket address and the folder can be made, else in `/tmp/wfrun-UID/`, which
    always fits. A long `$TMPDIR` (macOS's, a sandbox's) must not break the hooks."""
    name = f"claude-{claude_pid}.sock"
    tmpdir = os.environ.get("TMPDIR") or "/tmp"
    bases = [tmpdir] if os.path.realpath(tmpdir) == "/tmp" else [tmpdir, "/tmp"]
    problems = []
    for base in bases:
        # The private folder's name is known before it exists: check the length first.
        if len(os.fsencode(os.path.join(base, f"wfrun-{os.getuid()}", name))) \
                > MAX_SOCKET_PATH:
            problems.append(f"{base} is too long for a socket path")
            continue
        try:
            return os.path.join(_private_dir(base), name)
        except (ChannelError, OSError) as exc:
            problems.append(str(exc))
    raise ChannelError("no folder for the hooks' socket: " + "; ".join(problems))


def _parent_and_name(pid: int) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return None
    name = stat[stat.find("(") + 1:stat.rfind(")")]
    fields = stat[stat.rfind(")") + 2:].split()
    return (int(fields[1]), name) if len(fields) > 1 and fields[1].isdigit() else None


def claude_process(start: int | None = None, max_depth: int = 8) -> int:
    """The Claude process this server serves: the nearest ancestor named `claude`
    (a user may wrap the server in `uv run` or a shell), else the parent."""
    parent = os.getppid() if start is None else start
    pid = parent
    for _ in range(max_depth):
        found = _parent_and_name(pid)
        if found is None:
            break
        if found[1] == "claude":
            return pid
        if found[0] <= 1:
            break
        pid = found[0]
    return parent


def call(claude_pid: int, request: dict[str, Any], timeout: float = REPLY_TIMEOUT,
         ) -> dict[str, Any] | None:
    """Send one request; the reply, or None when no server listens for that process."""
    path = socket_path(claude_pid)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            return None
        sock.sendall(json.dumps({"v": PROTOCOL, **request}).encode() + b"\n")
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                break
    except OSError as exc:
        raise ChannelError(f"the wfrun mcp server did not answer: {exc}") from None
    finally:
        sock.close()
    if not chunks:
        raise ChannelError("the wfrun mcp server closed the connection without a reply")
    try:
        reply = jsonin.loads(b"".join(chunks))
    except ValueError:
        raise ChannelError("the wfrun mcp server sent a malformed reply") from None
    if not isinstance(reply, dict):
        raise ChannelError("the wfrun mcp server sent a malformed reply")
    return reply
