"""The gateway's door: request size caps, bearer tokens and a per-token concurrency limit, as ASGI middleware.

Why middleware and not route dependencies: every protected route gets the same checks in the same order
before any of its code runs (size first, so an oversized body is refused before it is read whole), and the
concurrency slot is held until the last byte of the response is sent. Answers are JSON, ``{"detail": ...}``,
as FastAPI's own errors: 413 (too large), 401 (no token: ``WWW-Authenticate: Bearer``), 403 (a token that is
not ours), 429 (this token's requests in flight are at the limit). Tokens are compared in constant time and
never logged; a request is counted under the index of its token (or ``anonymous`` on a loopback bind
without tokens).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

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


class Guard:
    """Wraps the app: ``max_body_bytes``, ``tokens`` (empty: none needed) and ``concurrency`` per token."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: tuple[str, ...],
        concurrency: int,
        max_body_bytes: int,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics or GatewayMetrics()
        self.tokens = tuple(t.encode() for t in tokens)
        self.concurrency = concurrency
        self.max_body_bytes = max_body_bytes
        self.in_flight: dict[str, int] = {}

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
            if self.in_flight.get(who, 0) >= self.concurrency:
                await self._refuse(send, 429, f"{self.concurrency} requests of this client are already in flight")
                return
            self.in_flight[who] = self.in_flight.get(who, 0) + 1
        try:
            await self._call_capped(scope, receive, send)
        finally:
            if who is not None:
                self.in_flight[who] -= 1

    async def _call_capped(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the whole body first (up to the cap), then hand it to the app: a chunked body that grows past
        the cap is refused before the app sees any of it."""
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                await self._refuse(
                    send,
                    413,
                    f"the request body is over the {self.max_body_bytes}-byte cap (RS_GATEWAY_MAX_BODY_BYTES)",
                )
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # after the body: only the client's disconnect

        await self.app(scope, replay, send)

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
