"""The exporter's HTTP/1.1 client: one kept-alive connection that POSTs a batch of spans
and reads the answer's status (issue 40, tracing cost).

Why not `http.client`: it imports `email.parser` (a dozen `email.*` modules) to read
an answer's headers and `ssl` whether or not the endpoint is https (36 modules, 27-31
ms of CPU at load), and parses every answer's headers into an email `Message`. The
exporter needs much less: write one request, read a status line, `Content-Length`
or chunked framing, `Connection: close` and `Retry-After`. This is that, on a
socket (`ssl` imported only for an https endpoint). Its tests,
tests/integration/tracing/test_otlp_http.py, answer with every framing.

Only the standard library; errors are OSError (`BadAnswer` for an answer that is not
HTTP/1.x as it should be), so the caller has one kind to catch.
"""

from __future__ import annotations

import socket
import urllib.parse
from collections.abc import Mapping
from typing import Any, BinaryIO

__all__ = ["BadAnswer", "Connection"]

_MAX_LINE = 65_536  # an answer's status or header line, at most
_MAX_HEADERS = 100
_DRAIN = 1 << 16  # an answer's body is read (and dropped) this much at a time


class BadAnswer(OSError):
    """The receiver's answer is not well-formed HTTP/1.x: the connection is dropped."""


class Connection:
    """One kept-alive HTTP(S) connection to `url`, opened on first use and again after
    the receiver closed it. `headers` go with every request (the caller checked them:
    no line breaks, runner/engine/_otlpexport.py `_headers`)."""

    def __init__(self, url: str, headers: Mapping[str, str], *,
                 certificate: str | None = None, client_certificate: str | None = None,
                 client_key: str | None = None) -> None:
        parts = urllib.parse.urlsplit(url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.https else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        authority = host if parts.port is None else f"{host}:{parts.port}"
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        named = {"host": authority}
        # The body's framing is this client's: a configured length would corrupt it.
        named.update((name.lower(), value) for name, value in headers.items()
                     if name.lower() not in ("content-length", "transfer-encoding"))
        lines = [f"POST {path} HTTP/1.1"] + [f"{name}: {value}" for name, value in named.items()]
        # Everything but the length, encoded once: a request is this, a number, the body.
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        self._context: Any = None
        if self.https:
            import ssl  # only here: an http:// endpoint never loads it

            self._context = ssl.create_default_context(cafile=certificate)
            if client_certificate:
                self._context.load_cert_chain(client_certificate, client_key)
        self._socket: socket.socket | None = None
        self._reader: BinaryIO | None = None

    def post(self, body: bytes, timeout: float) -> tuple[int, float | None]:
        """The receiver's status and its Retry-After seconds (None without one, or for
        an HTTP date); OSError when there is no answer."""
        reused = self._socket is not None
        try:
            return self._post(body, timeout)
        except OSError:
            self.close()
            if not reused:
                raise
        # A kept-alive connection the receiver closed meanwhile: once more, fresh.
        return self._post(body, timeout)

    def close(self) -> None:
        reader, sock = self._reader, self._socket
        self._reader = self._socket = None
        if reader is not None:
            reader.close()
        if sock is not None:
            sock.close()

    def _open(self, timeout: float) -> tuple[socket.socket, BinaryIO]:
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self._socket, self._reader = sock, sock.makefile("rb")
        return sock, self._reader

    def _post(self, body: bytes, timeout: float) -> tuple[int, float | None]:
        if self._socket is None or self._reader is None:
            sock, reader = self._open(timeout)
        else:
            sock, reader = self._socket, self._reader
            sock.settimeout(timeout)
        sock.sendall(b"%s%d\r\n\r\n%s" % (self._head, len(body), body))
        while True:
            status, headers = _answer(reader)
            if not 100 <= status < 200:  # 1xx: interim answers, the real one follows
                break
        closes = "close" in headers.get("connection", "").lower() or (
            # No framing: the body runs to the connection's end (but for the two
            # answers that never have one).
            status not in (204, 304) and "content-length" not in headers
            and "transfer-encoding" not in headers)
        _drain(reader, headers, closes)
        if closes:
            self.close()
        retry_after = headers.get("retry-after", "")
        try:
            wait = float(retry_after) if retry_after else None
        except ValueError:
            wait = None  # an HTTP date: the caller's own backoff instead
        return status, wait


def _line(reader: BinaryIO) -> bytes:
    line = reader.readline(_MAX_LINE + 1)
    if not line:
        raise BadAnswer("the receiver closed the connection without an answer")
    if len(line) > _MAX_LINE:
        raise BadAnswer("an answer line longer than 64 KiB")
    return line


def _answer(reader: BinaryIO) -> tuple[int, dict[str, str]]:
    """The status and the headers (names lower-cased) of one answer."""
    version, _, rest = _line(reader).partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise BadAnswer(f"not an HTTP/1.x status line: {version[:40]!r}")
    headers: dict[str, str] = {}
    for _ in range(_MAX_HEADERS + 1):
        line = _line(reader)
        if line in (b"\r\n", b"\n"):
            if version == b"HTTP/1.0" and "keep-alive" not in headers.get("connection", ""):
                headers["connection"] = "close"  # 1.0 closes unless it says otherwise
            return int(code), headers
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon:
            raise BadAnswer(f"not a header line: {line[:40]!r}")
        name = name.strip().lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    raise BadAnswer(f"more than {_MAX_HEADERS} header lines in an answer")


def _drain(reader: BinaryIO, headers: Mapping[str, str], closes: bool) -> None:
    """Read the answer's body (dropped: an OTLP answer's partial-success note is not
    acted on), so the connection can carry the next request."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = _line(reader).split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise BadAnswer(f"not a chunk size: {size_line[:20]!r}") from None
            if size == 0:
                while _line(reader) not in (b"\r\n", b"\n"):  # trailers
                    pass
                return
            _skip(reader, size)
            if _line(reader) not in (b"\r\n", b"\n"):
                raise BadAnswer("a chunk not followed by a line break")
    length = headers.get("content-length")
    if length is not None:
        try:
            size = int(length)
        except ValueError:
            raise BadAnswer(f"not a Content-Length: {length[:20]!r}") from None
        if size < 0:
            raise BadAnswer(f"a negative Content-Length: {size}")
        _skip(reader, size)
    elif closes:  # the body ends where the connection does
        while reader.read(_DRAIN):
            pass


def _skip(reader: BinaryIO, size: int) -> None:
    while size > 0:
        got = len(reader.read(min(size, _DRAIN)))
        if not got:
            raise BadAnswer("the receiver closed the connection inside an answer")
        size -= got
