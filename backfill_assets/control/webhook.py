"""One webhook POST with a total deadline.

`urllib`'s `timeout` bounds each socket operation, not the request: a receiver that answers one
byte every few seconds keeps it waiting for ever. Here every connect, send and receive gets only
the time left until one deadline, so a delivery ends by then whatever the receiver does. The name
is resolved within it too (`getaddrinfo` has no timeout of its own: a dead resolver holds it for
as long as the system's resolver retries), and every address tried shares it. Only the status line
is read (a receiver's body is of no use to us), and the connection is then closed.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 16 * 1024


class _Deadline(Exception):
    pass


def _left(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _Deadline
    return remaining


def _resolve(host: str, port: int, deadline: float) -> list[tuple[Any, ...]]:
    """The addresses of `host`, or _Deadline: the lookup runs in a thread nobody waits for past the
    deadline (a lookup cannot be interrupted; it ends when the resolver gives up)."""
    found: dict[str, object] = {}

    def lookup() -> None:
        try:
            found["addresses"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except Exception as exc:  # noqa: BLE001 - said as the delivery's failure (a name idna cannot encode
            found["error"] = exc  # raised UnicodeError here, which killed the thread: found by an attack)

    worker = threading.Thread(target=lookup, name="backfill-webhook-lookup", daemon=True)
    worker.start()
    worker.join(_left(deadline))
    if worker.is_alive():
        raise _Deadline
    if "error" in found:
        raise found["error"]  # type: ignore[misc]
    if "addresses" not in found:
        raise OSError(f"no address for {host}")
    return found["addresses"]  # type: ignore[return-value]


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    """A connection to the first address that takes one, all of them within the one deadline
    (`socket.create_connection` gives each address the whole timeout again)."""
    failure: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, address in _resolve(host, port, deadline):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(address)
            return sock
        except TimeoutError:
            sock.close()
            raise _Deadline from None
        except BaseException as exc:
            sock.close()
            if not isinstance(exc, OSError):
                raise
            failure = exc
    raise failure


def post(url: str, body: str, seconds: float) -> tuple[bool, str]:
    """POST `body` as JSON to `url`; (delivered, detail) within `seconds` in total. Never raises."""
    deadline = time.monotonic() + seconds
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False, f"not an http(s) URL: {url[:80]}"
        port = parts.port or (443 if parts.scheme == "https" else 80)
        sock = _connect(parts.hostname, port, deadline)
    except (_Deadline, TimeoutError):
        return False, f"no answer within the {seconds:g}s deadline"
    except Exception as exc:  # noqa: BLE001 - never raises: whatever failed is this attempt's detail
        return False, str(exc)[:200] or type(exc).__name__
    try:
        if parts.scheme == "https":
            sock.settimeout(_left(deadline))
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parts.hostname)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        payload = body.encode("utf-8")
        head = (f"POST {path} HTTP/1.1\r\nHost: {parts.netloc.rpartition('@')[2]}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                "Connection: close\r\nUser-Agent: backfill-assets\r\n\r\n").encode("latin-1")
        data = head + payload
        while data:
            sock.settimeout(_left(deadline))
            sent = sock.send(data)
            data = data[sent:]
        received = b""
        while b"\r\n" not in received:
            sock.settimeout(_left(deadline))
            chunk = sock.recv(1024)
            if not chunk:
                break
            received += chunk
            if len(received) > MAX_HEAD_BYTES:
                break
        line = received.split(b"\r\n", 1)[0].decode("latin-1", errors="replace")
        fields = line.split(" ", 2)
        if len(fields) < 2 or not fields[0].startswith("HTTP/") or not fields[1].isdigit():
            return False, f"not an HTTP answer: {line[:80]!r}"
        status = int(fields[1])
        return 200 <= status < 300, f"HTTP {status}"
    except (_Deadline, TimeoutError):
        return False, f"no complete answer within the {seconds:g}s deadline"
    except Exception as exc:  # noqa: BLE001 - never raises (ssl.SSLError is an OSError)
        return False, str(exc)[:200] or type(exc).__name__
    finally:
        sock.close()
