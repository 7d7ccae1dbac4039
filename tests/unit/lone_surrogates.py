"""Putting one lone surrogate into a JSON value, for the gateway's fuzzing (unit and through the real gateway).

A surrogate goes into one string of the value, a string value or an object's key, and the location the
gateway must name comes back with it: FastAPI's ``loc`` less ``"body"`` (a key is named by its object).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

Loc = tuple[str | int, ...]

#: Half of a UTF-16 pair, either half.
lone_surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


def string_slots(value: object) -> list[tuple[Loc, str | None]]:
    """Every string in ``value``: (its location, None) for a value, (its object's location, key) for a key."""
    slots: list[tuple[Loc, str | None]] = []
    stack: list[tuple[object, Loc]] = [(value, ())]
    while stack:
        node, loc = stack.pop()
        if isinstance(node, str):
            slots.append((loc, None))
        elif isinstance(node, dict):
            for key, item in node.items():
                slots.append((loc, key))
                stack.append((item, (*loc, key)))
        elif isinstance(node, list):
            stack.extend((item, (*loc, i)) for i, item in enumerate(node))
    return slots


def _replace(value: Any, loc: Loc, change: Any) -> Any:
    """``value`` with the node at ``loc`` replaced by ``change(node)`` (copies along the way)."""
    if not loc:
        return change(value)
    head, rest = loc[0], loc[1:]
    if isinstance(value, dict):
        return {k: _replace(v, rest, change) if k == head else v for k, v in value.items()}
    return [_replace(v, rest, change) if i == head else v for i, v in enumerate(value)]


@st.composite
def with_a_lone_surrogate(draw: st.DrawFn, value: object) -> tuple[object, Loc]:
    """``value`` with one lone surrogate put into one of its strings, and where the gateway must say it is."""
    slots = string_slots(value)
    if not slots:  # no string to spoil: the value itself becomes one
        value, slots = "", [((), None)]
    loc, key = draw(st.sampled_from(slots))
    surrogate = draw(lone_surrogates)

    def spoil(text: str) -> str:
        at = draw(st.integers(0, len(text)))
        return text[:at] + surrogate + text[at:]

    if key is None:
        return _replace(value, loc, spoil), loc
    bad = spoil(key)
    return _replace(value, loc, lambda obj: {(bad if k == key else k): v for k, v in obj.items()}), loc
