"""The exporter's HTTP/1.1 client (runner/engine/_otlphttp.py) against real servers on
127.0.0.1: a socket server that answers each request with scripted bytes (every
framing an HTTP/1.x answer may use, interim answers, a kept-alive connection the
server closed, answers that are not HTTP), a TLS server with a certificate made
here, and the OTLP receiver; and a traced process that sends spans without
importing `http.client`, `email` or `ssl`."""

from __future__ import annotations

import datetime
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.otlp_receiver import OtlpReceiver

from runner.engine._otlphttp import BadAnswer, Connection

REPO = Path(__file__).resolve().parents[3]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class Scripted:
    """A server that reads each request whole (by its Content-Length) and answers the
    next scripted bytes; `b""` closes the connection instead of answering. Keeps what
    it read and counts connections."""

    def __init__(self, answers: list[bytes], tls: ssl.SSLContext | None = None) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0
        self._tls = tls
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            if self._tls is not None:
                try:
                    conn = self._tls.wrap_socket(conn, server_side=True)
                except OSError:
                    conn.close()
                    continue
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        with conn, reader:
            while self.answers:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                self.requests.append(head + reader.read(length))
                answer = self.answers.pop(0)
                if not answer:
                    return  # closed without an answer
                conn.sendall(answer)
                framed = b"Content-Length" in answer or b"chunked" in answer \
                    or b" 204 " in answer
                if b"Connection: close" in answer or b"HTTP/1.0" in answer or not framed:
                    return  # the answer ends where the connection does

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def serve() -> Iterator[list[Scripted]]:
    servers: list[Scripted] = []
    yield servers
    for server in servers:
        server.close()


def connect(server: Scripted, **headers: str) -> Connection:
    return Connection(f"http://127.0.0.1:{server.port}/v1/traces", headers)


@pytest.mark.parametrize("answer", [
    OK,
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n",
    b"HTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
], ids=["length", "chunked", "no-content", "interim-answer"])
def test_each_framing_leaves_the_connection_ready_for_the_next_request(
        serve: list[Scripted], answer: bytes) -> None:
    server = Scripted([answer, OK])
    serve.append(server)
    client = connect(server)
    assert client.post(b"first", 5) == (200 if b"204" not in answer else 204, None)
    assert client.post(b"second", 5) == (200, None)
    assert server.connections == 1  # kept alive
    assert [r.split(b"\r\n\r\n", 1)[1] for r in server.requests] == [b"first", b"second"]
    client.close()


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n\r\nuntil the end",  # no framing: the body runs to the close
    b"HTTP/1.0 200 OK\r\n\r\n",
], ids=["connection-close", "unframed", "http-1.0"])
def test_an_answer_that_closes_is_followed_by_a_fresh_connection(
        serve: list[Scripted], answer: bytes) -> None:
    server = Scripted([answer, OK])
    serve.append(server)
    client = connect(server)
    assert client.post(b"first", 5) == (200, None)
    assert client.post(b"second", 5) == (200, None)
    assert server.connections == 2
    client.close()


def test_a_kept_connection_the_server_closed_is_opened_again_once(
        serve: list[Scripted]) -> None:
    server = Scripted([OK, b"", OK])  # the second request's connection is closed unanswered
    serve.append(server)
    client = connect(server)
    assert client.post(b"1", 5) == (200, None)
    assert client.post(b"2", 5) == (200, None)  # tried again on a fresh connection
    assert server.connections == 2
    assert [r.split(b"\r\n\r\n", 1)[1] for r in server.requests] == [b"1", b"2", b"2"]
    client.close()


def test_the_request_says_its_headers_and_length_and_the_answer_its_retry_after(
        serve: list[Scripted]) -> None:
    server = Scripted([b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\nContent-Length: 0\r\n\r\n",
                       b"HTTP/1.1 429 Slow\r\nRetry-After: Wed, 21 Oct 2026 07:28:00 GMT"
                       b"\r\nContent-Length: 0\r\n\r\n"])
    serve.append(server)
    client = connect(server, **{"Content-Type": "application/x-protobuf",
                                "X-Api-Key": "k=v", "Content-Length": "999"})
    assert client.post(b"\x00\x01body", 5) == (503, 7.0)
    assert client.post(b"", 5) == (429, None)  # an HTTP date: the caller's backoff
    head, body = server.requests[0].split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/traces HTTP/1.1"
    assert sorted(lines[1:]) == sorted([
        f"host: 127.0.0.1:{server.port}".encode(), b"content-type: application/x-protobuf",
        b"x-api-key: k=v", b"Content-Length: 6"])  # a configured length is not sent
    assert body == b"\x00\x01body"
    client.close()


@pytest.mark.parametrize("answer", [
    b"SSH-2.0-OpenSSH_9.6\r\n",
    b"HTTP/1.1 2x0 Odd\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nshort",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n",
], ids=["not-http", "bad-status", "bad-header", "short-body", "bad-chunk"])
def test_an_answer_that_is_not_http_is_an_oserror(serve: list[Scripted],
                                                  answer: bytes) -> None:
    server = Scripted([answer, answer])
    serve.append(server)
    client = connect(server)
    with pytest.raises(BadAnswer):
        client.post(b"x", 5)
    assert isinstance(BadAnswer("x"), OSError)  # the exporter's one kind to catch
    client.close()


def test_nobody_listening_is_a_refused_connection() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    with pytest.raises(ConnectionRefusedError):
        Connection(f"http://127.0.0.1:{port}/v1/traces", {}).post(b"x", 5)


def _certificate(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def test_https_checks_the_receivers_certificate(serve: list[Scripted],
                                                tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server = Scripted([OK, OK], tls=tls)
    serve.append(server)
    trusted = Connection(f"https://localhost:{server.port}/v1/traces", {},
                         certificate=str(cert))
    assert trusted.post(b"over tls", 5) == (200, None)
    assert server.requests[0].endswith(b"\r\n\r\nover tls")
    trusted.close()
    stranger = Connection(f"https://localhost:{server.port}/v1/traces", {})
    with pytest.raises(ssl.SSLCertVerificationError):  # an OSError too
        stranger.post(b"x", 5)


def test_a_traced_process_sends_spans_without_http_client_email_or_ssl() -> None:
    receiver = OtlpReceiver().start()
    try:
        probe = (
            "import os, sys\n"
            f"os.environ['OTEL_EXPORTER_OTLP_ENDPOINT'] = {receiver.endpoint!r}\n"
            "from runner.engine import _tracing\n"
            "from runner.engine._state import RunState\n"
            "tracing = _tracing.active()\n"
            "state = RunState('r1'); state.workflow = 'w'\n"
            "tracing.observer(None)({'type': 'run_completed', 'at': None}, state)\n"
            "tracing.flush()\n"
            "print(' '.join(sorted(m for m in sys.modules\n"
            "                      if m.split('.')[0] in ('http', 'email', 'ssl'))))\n")
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             env=env, check=False, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == []
        assert [s.name for s in receiver.received()] == ["run w"]
    finally:
        receiver.stop()
