"""What the LLM-judge tests share: the real SmolLM2 judge (loaded once per process: transformers' loader is
cached, so every module's fixture after the first costs nothing), a free port, and raw HTTP exchanges (the
fixtures `one_thread` and `judge_servers` are in conftest.py)."""

from __future__ import annotations

import socket
import threading

import pytest
from neuroneval import label as lb
from neuroneval.errors import SourceError


def smollm2_judge() -> lb.LocalLLMJudge:
    """SmolLM2-135M-Instruct (float32), its model loaded; the test is skipped where it is not installed."""
    try:
        judge = lb.smollm2()
    except SourceError as e:
        pytest.skip(f"SmolLM2 is not installed: {e}")
    judge.prepare()
    return judge


def free_port() -> int:
    """A port nothing listens on (bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_of(url: str) -> int:
    """The port of a server's URL, http://127.0.0.1:PORT/v1."""
    return int(url.rsplit(":", 1)[1].split("/")[0])


def read_all(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset after its answer ends it too)."""
    got = b""
    while True:
        try:
            chunk = conn.recv(65536)
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk


def exchange(port: int, data: bytes, *, body: bytes = b"", deadline: float = 60.0) -> bytes:
    """Sends `data` (then `body`, from another thread, ignoring a server that stops reading) on a fresh
    connection and returns all the server sends before it closes it. `deadline` is when the test gives up
    waiting for the server to close, not a time the test asserts."""
    conn = socket.create_connection(("127.0.0.1", port))
    conn.settimeout(deadline)
    sender = None
    try:
        conn.sendall(data)
        if body:

            def send_body() -> None:
                try:
                    conn.sendall(body)
                except OSError:  # the server answered and closed without reading it
                    pass

            sender = threading.Thread(target=send_body, daemon=True)
            sender.start()
        return read_all(conn)
    finally:
        conn.close()
        if sender is not None:
            sender.join(timeout=10)


def status_of(answer: bytes) -> int:
    """The status code of an HTTP answer (0 for none)."""
    if not answer:
        return 0
    return int(answer.split(b"\r\n", 1)[0].split(b" ")[1])


def header_of(answer: bytes, name: str) -> str | None:
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
    for line in head:
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None
