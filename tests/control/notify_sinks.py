"""Real network receivers for the notification tests: an HTTP server and an SMTP sink.

Both listen on 127.0.0.1 in a thread and record what they got. The webhook
receiver answers from a script of status codes (then 200), so a test can make it
fail twice and then accept. The SMTP sink speaks just enough of RFC 5321 for
``smtplib`` (EHLO, MAIL, RCPT, DATA, QUIT); no TLS, as a relay on localhost.
"""

from __future__ import annotations

import contextlib
import socketserver
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class WebhookReceiver:
    url: str
    statuses: list[int] = field(default_factory=list)  # answered in order, then 200
    got: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextlib.contextmanager
def webhook_receiver(statuses: list[int] | None = None) -> Iterator[WebhookReceiver]:
    box: list[WebhookReceiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server calls it by this name
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            rec = box[0]
            with rec.lock:
                rec.got.append(Received(self.path, dict(self.headers.items()), body))
                code = rec.statuses.pop(0) if rec.statuses else 200
            self.send_response(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    box.append(WebhookReceiver(f"http://127.0.0.1:{server.server_address[1]}",
                               list(statuses or [])))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box[0]
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class SmtpSink:
    port: int
    messages: list[tuple[str, list[str], Message]] = field(default_factory=list)


@contextlib.contextmanager
def smtp_sink() -> Iterator[SmtpSink]:
    box: list[SmtpSink] = []

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            say = self.wfile.write
            say(b"220 sink ESMTP\r\n")
            sender, rcpts = "", []
            while line := self.rfile.readline():
                verb = line.decode().strip()
                upper = verb.upper()
                if upper.startswith(("EHLO", "HELO")):
                    say(b"250-sink\r\n250 8BITMIME\r\n")
                elif upper.startswith("MAIL FROM:"):
                    sender = verb[10:].strip(" <>")
                    say(b"250 OK\r\n")
                elif upper.startswith("RCPT TO:"):
                    rcpts.append(verb[8:].strip(" <>"))
                    say(b"250 OK\r\n")
                elif upper == "DATA":
                    say(b"354 end with .\r\n")
                    data = b""
                    while (chunk := self.rfile.readline()) not in (b".\r\n", b""):
                        data += chunk[1:] if chunk.startswith(b"..") else chunk
                    box[0].messages.append((sender, rcpts, message_from_bytes(data)))
                    say(b"250 queued\r\n")
                elif upper == "QUIT":
                    say(b"221 bye\r\n")
                    return
                else:
                    say(b"250 OK\r\n")

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    box.append(SmtpSink(server.server_address[1]))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box[0]
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def dripping_receiver(seconds: float = 30.0) -> Iterator[str]:
    """A receiver that answers 500 and then drips its body one byte every 0.2 s for
    ``seconds``: each read is quick, the whole answer is not. Yields its URL."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server calls it by this name
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            n = int(seconds / 0.2)
            self.send_response(500)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            self.wfile.flush()
            for _ in range(n):
                if stop.is_set():
                    return
                try:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                except OSError:
                    return
                stop.wait(0.2)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
