"""Hold idle and half-sent (slowloris: half a head, or a head and a trickling body) connections open against a local server and time
normal requests meanwhile.

    python slow_clients.py URL [--idle 100] [--half 100] [--seconds 20] [--path /login/]

Bounded on purpose: 127.0.0.1 only, at most 500 connections, at most 120 seconds. Prints
one JSON line: the normal requests' latencies (or errors) while the connections are held,
and how many held connections the server had closed by the end.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from urllib.parse import urlsplit

MAX_CONNECTIONS = 500
MAX_SECONDS = 120.0


def _open(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=5)
    sock.setblocking(False)
    return sock


def _send(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.send(data)
        return True
    except OSError:
        return False


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""  # EOF: the server hung up
    except BlockingIOError:
        return False
    except OSError:
        return True


def _get(host: str, port: int, path: str, timeout: float) -> tuple[float, str]:
    """One plain HTTP/1.1 GET on a fresh connection: (seconds, status line or error)."""
    started = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            head = b""
            while b"\r\n" not in head:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                head += chunk
        status = head.split(b"\r\n", 1)[0].decode("latin-1") or "empty answer"
    except OSError as exc:
        status = f"error: {type(exc).__name__}"
    return time.monotonic() - started, status


def probe(url: str, *, idle: int, half: int, seconds: float, path: str, timeout: float = 10.0) -> dict[str, object]:
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    if host != "127.0.0.1":
        raise SystemExit("slow_clients only talks to 127.0.0.1")
    if idle + half > MAX_CONNECTIONS or seconds > MAX_SECONDS:
        raise SystemExit(f"at most {MAX_CONNECTIONS} connections and {MAX_SECONDS:.0f} s")

    baseline = [_get(host, port, path, timeout) for _ in range(3)]
    held_idle = [_open(host, port) for _ in range(idle)]
    held_half = [_open(host, port) for _ in range(half)]
    for n, sock in enumerate(held_half):
        if n % 2 == 0:
            # a request line and one header, never the blank line that ends the head
            _send(sock, f"GET /login/?slow={n} HTTP/1.1\r\nHost: {host}\r\n".encode())
        else:
            # a whole head announcing a body that then arrives a few bytes at a time; the
            # CSRF cookie makes Django read the body (without one it refuses unread)
            _send(
                sock,
                f"POST /login/ HTTP/1.1\r\nHost: {host}\r\nCookie: csrftoken={'a' * 32}\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\n".encode(),
            )
    latencies: list[float] = []
    failures: list[str] = []
    deadline = time.monotonic() + seconds
    tick = 0
    while time.monotonic() < deadline:
        tick += 1
        for n, sock in enumerate(held_half):  # a slowloris keeps each request growing
            _send(sock, f"X-Slow-{tick}: y\r\n".encode() if n % 2 == 0 else b"a=b&")
        took, status = _get(host, port, path, timeout)
        if status.startswith("HTTP/1.1 200") or status.startswith("HTTP/1.0 200"):
            latencies.append(took)
        else:
            failures.append(f"{status} after {took:.1f}s")
        time.sleep(max(0.0, 1.0 - took))
    closed_idle = sum(_closed_by_server(s) for s in held_idle)
    closed_half = sum(_closed_by_server(s) for s in held_half)
    for sock in held_idle + held_half:
        sock.close()
    return {
        "url": url + path,
        "idle": idle,
        "half_sent": half,
        "seconds": seconds,
        "baseline_ms": [round(t * 1000, 1) for t, _ in baseline],
        "answered": len(latencies),
        "failed": failures,
        "median_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "max_ms": round(max(latencies) * 1000, 1) if latencies else None,
        "closed_by_server": {"idle": closed_idle, "half_sent": closed_half},
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--idle", type=int, default=100)
    parser.add_argument("--half", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--path", default="/login/")
    parser.add_argument("--timeout", type=float, default=10.0)
    args = parser.parse_args(argv)
    result = probe(args.url, idle=args.idle, half=args.half, seconds=args.seconds, path=args.path, timeout=args.timeout)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
