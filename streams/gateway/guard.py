"""The gateway's door: request size caps, bearer tokens, a body deadline and concurrency limits, as ASGI middleware.

Why middleware and not route dependencies: every protected route gets the same checks in the same order
before any of its code runs (size first, so an oversized body is refused before it is read whole), and the
concurrency slot is held until the last byte of the response is sent. Answers are JSON, ``{"detail": ...}``,
as FastAPI's own errors: 413 (too large), 401 (no token: ``WWW-Authenticate: Bearer``), 403 (a token that is
not ours), 408 (the body did not arrive within ``body_timeout_s``), 429 (this token's requests in flight are
at the limit, or this peer address already has ``peer_body_reads`` bodies arriving). Tokens are compared in
constant time and never logged; a request is counted under the index of its token (or ``anonymous`` on a
loopback bind without tokens).

Why the token's slot is taken only once the whole body is in: a client that sends its headers and stalls
would otherwise hold a slot of its token (of everyone's, on the tokenless loopback bind) for as long as it
likes. A body is read under a deadline instead, and the bodies one peer address may have arriving at once are
capped, so stalled uploads cost a bounded number of sockets and buffers per address and lock nobody out.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

import orjson

from schemas.settings import GatewaySettings, defaults
from streams.gateway.metrics import GatewayMetrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Paths anyone may read: the schema, its docs, liveness and metrics.
OPEN_PATHS = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/health", "/metrics"})


async def send_json(send: Send, status: int, body: object, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """One complete JSON response."""
    data = orjson.dumps(body)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


#: Sent with an answer to a client that is not sending its body (stalled, or one too many of its address):
#: the connection is closed at once rather than left waiting for the rest (uvicorn drains it otherwise).
CLOSE = [(b"connection", b"close")]


class BodyTooLargeError(Exception):
    """A body that grew past the cap while it was being read."""


def expects_body(headers: Mapping[bytes, bytes]) -> bool:
    """Whether a request has a body still to come: a non-zero Content-Length, or any Transfer-Encoding."""
    length = headers.get(b"content-length")
    return b"transfer-encoding" in headers or (length is not None and length.strip(b" 0") != b"")


def peer_of(scope: Scope) -> str:
    """The client's address (the TCP peer: a proxy in front is one peer)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class Counts:
    """How many of something each key holds; a key at zero is dropped (addresses come and go)."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {}

    def get(self, key: str) -> int:
        return self.held.get(key, 0)

    def take(self, key: str) -> None:
        self.held[key] = self.held.get(key, 0) + 1

    def give(self, key: str) -> None:
        left = self.held.get(key, 0) - 1
        if left > 0:
            self.held[key] = left
        else:
            self.held.pop(key, None)


#: The gateway settings' defaults, this guard's.
_DEFAULTS = defaults(GatewaySettings)


class Guard:
    """Wraps the app: ``max_body_bytes``, ``tokens`` (empty: none needed), ``concurrency`` per token, a body
    read within ``body_timeout_s``, and at most ``peer_body_reads`` bodies arriving per peer address."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: tuple[str, ...],
        concurrency: int,
        max_body_bytes: int,
        body_timeout_s: float = _DEFAULTS.body_timeout_s,
        peer_body_reads: int = _DEFAULTS.peer_body_reads,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics or GatewayMetrics()
        self.tokens = tuple(t.encode() for t in tokens)
        self.concurrency = concurrency
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.peer_body_reads = peer_body_reads
        self.in_flight: dict[str, int] = {}
        self.reading = Counts()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self._guarded(scope, receive, observed)
        finally:
            self.metrics.in_flight.dec()
            self.metrics.observe(str(scope.get("path", "")), status, time.monotonic() - started)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        refusal = self._size_refusal(headers.get(b"content-length"))
        if refusal is not None:
            await self._refuse(send, 413, refusal)
            return
        who: str | None = None
        if scope.get("path", "") not in OPEN_PATHS:
            who, status, problem = self._identify(headers.get(b"authorization"))
            if who is None:
                extra = [(b"www-authenticate", b'Bearer realm="rewardstream"')] if status == 401 else None
                await self._refuse(send, status, problem, extra)
                return
        body = await self._body(scope, headers, receive, send)
        if body is None:  # refused, or the client left
            return
        if who is not None:
            if self.in_flight.get(who, 0) >= self.concurrency:
                await self._refuse(send, 429, f"{self.concurrency} requests of this client are already in flight")
                return
            self.in_flight[who] = self.in_flight.get(who, 0) + 1
        try:
            await self.app(scope, _replay(body, receive), send)
        finally:
            if who is not None:
                self.in_flight[who] -= 1

    async def _body(self, scope: Scope, headers: Mapping[bytes, bytes], receive: Receive, send: Send) -> bytes | None:
        """The whole body, read within the deadline while this peer holds one of its body slots; None when it
        was refused (408, 413, 429) or the client left."""
        peer = peer_of(scope) if expects_body(headers) else None
        if peer is not None:
            if self.reading.get(peer) >= self.peer_body_reads:
                await self._refuse(
                    send, 429,
                    f"{self.peer_body_reads} requests from this address are already sending their bodies "
                    "(RS_GATEWAY_PEER_BODY_READS)",
                    CLOSE,
                )  # fmt: skip
                return None
            self.reading.take(peer)
            self.metrics.body_reads.inc()
        try:
            async with asyncio.timeout(self.body_timeout_s):
                return await self._read_capped(receive)
        except TimeoutError:
            status, extra = 408, CLOSE
            problem = f"the request body did not arrive within {self.body_timeout_s:g}s (RS_GATEWAY_BODY_TIMEOUT_S)"
        except BodyTooLargeError:
            status, extra = 413, None
            problem = f"the request body is over the {self.max_body_bytes}-byte cap (RS_GATEWAY_MAX_BODY_BYTES)"
        finally:
            if peer is not None:  # given back before the answer is sent
                self.reading.give(peer)
                self.metrics.body_reads.dec()
        await self._refuse(send, status, problem, extra)
        return None

    async def _read_capped(self, receive: Receive) -> bytes | None:
        """Every chunk up to the cap (a chunked body that grows past it raises ``BodyTooLargeError`` before the
        app sees any of it); None if the client disconnects first."""
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                raise BodyTooLargeError
            if not message.get("more_body", False):
                return bytes(body)

    def _size_refusal(self, length: bytes | None) -> str | None:
        if length is None:
            return None
        if not length.isdigit():
            return "Content-Length is not a number"
        if int(length) > self.max_body_bytes:
            return f"the request body ({int(length)} bytes) is over the {self.max_body_bytes}-byte cap"
        return None

    def _identify(self, authorization: bytes | None) -> tuple[str | None, int, str]:
        """(who, status, problem): who is None when refused with ``status``."""
        if not self.tokens:
            return "anonymous", 200, ""
        if authorization is None:
            return None, 401, "this gateway needs a bearer token: send 'Authorization: Bearer <token>'"
        scheme, _, value = authorization.strip().partition(b" ")
        if scheme.lower() != b"bearer" or not value.strip():
            return None, 401, "the Authorization header must be 'Bearer <token>'"
        token = value.strip()
        for n, known in enumerate(self.tokens):
            if hmac.compare_digest(token, known):
                return f"token-{n}", 200, ""
        return None, 403, "this token is not accepted here"

    async def _refuse(
        self, send: Send, status: int, problem: str, headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        await send_json(send, status, {"detail": problem}, headers)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The app's ``receive``: the whole body once, then the client's own messages (only its disconnect)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
