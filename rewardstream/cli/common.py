"""Helpers shared by the command modules: settings loading and output."""

from __future__ import annotations

import sys
from typing import Any

import orjson
import pydantic

from schemas.errors import ConfigError
from schemas.settings import Settings


def load_settings() -> Settings:
    """Settings from the environment, with a one-line error naming the bad variable."""
    try:
        return Settings()
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise ConfigError(f"bad setting RS_{field.upper()}: {first['msg']}") from None


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")
    sys.stdout.flush()
