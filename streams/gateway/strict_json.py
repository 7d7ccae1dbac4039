"""FastAPI's JSON in and out of the gateway, made safe for text no UTF-8 encoder takes.

In: a route class whose request refuses a JSON body holding a lone surrogate (``surrogates.py``) with a 422
naming where it is, before pydantic sees the body. Out: FastAPI's 422 handler echoes each error's ``input``;
when that cannot be encoded (a lone surrogate, a non-UTF-8 body sent as ``text/plain``, a ``NaN`` that
Python's JSON parser takes and its encoder refuses), the errors are sent with their text escaped and such an
input left out, instead of the handler failing into a text/plain 500 with a traceback.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from streams.gateway.surrogates import lone_surrogate_at, printable


def surrogate_error(loc: Sequence[str | int], problem: str) -> dict[str, Any]:
    """One 422 error in FastAPI's shape for a lone surrogate at ``loc`` of the body."""
    return {"type": "string_unicode", "loc": ["body", *loc], "msg": problem, "input": None}


class CheckedRequest(Request):
    """A request whose parsed JSON body is refused (422 naming the field) when it holds a lone surrogate."""

    _surrogate: HTTPException | None = None

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            value = await super().json()
            found = lone_surrogate_at(value)
            if found is not None:
                # FastAPI turns any other exception raised while parsing into a 400; an HTTPException goes through
                self._surrogate = HTTPException(422, [surrogate_error(*found)])
        if self._surrogate is not None:
            raise self._surrogate
        return self._json


class CheckedRoute(APIRoute):
    """Routes whose handlers get a ``CheckedRequest`` (FastAPI's documented way to swap the request class)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            return await handler(CheckedRequest(request.scope, request.receive))

        return checked


def validation_response(errors: Sequence[Any]) -> JSONResponse:
    """FastAPI's 422 for these errors; with their text made encodable when it is not."""
    try:
        return JSONResponse(status_code=422, content={"detail": jsonable_encoder(errors)})
    except (UnicodeError, ValueError, RecursionError):
        return JSONResponse(status_code=422, content={"detail": [_printable_error(e) for e in errors]})


def _printable_error(error: Any) -> dict[str, Any]:
    if not isinstance(error, dict):
        return {"type": "value_error", "loc": ["body"], "msg": printable(str(error)), "input": None}
    given = error.get("input")
    out: dict[str, Any] = {
        "type": printable(str(error.get("type", "value_error"))),
        "loc": [p if isinstance(p, int) else printable(str(p)) for p in error.get("loc", ())],
        "msg": printable(str(error.get("msg", ""))),
        "input": printable(given) if isinstance(given, str | bytes) else None,
    }
    if isinstance(error.get("ctx"), dict):
        out["ctx"] = {printable(str(k)): _plain(v) for k, v in error["ctx"].items()}
    return out


def _plain(value: object) -> object:
    """A finite number as it is, anything else as printable text."""
    if isinstance(value, bool | int) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return printable(value if isinstance(value, str | bytes) else str(value))


async def validation_handler(_request: Request, exc: Exception) -> JSONResponse:
    """The app's handler of ``RequestValidationError`` (registered for that class only)."""
    return validation_response(exc.errors() if isinstance(exc, RequestValidationError) else [str(exc)])
