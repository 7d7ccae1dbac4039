"""Robust score parsing: models answer ``{"score": 7}``, ``Score: 7/10``, ``**8.5**``, ``70%`` or prose.

Why strict about ambiguity: a number we guessed wrong is a silently wrong reward; ``None`` becomes a
``JudgeScore`` with ``status="error"`` that the reward policy can see and count.
"""

from __future__ import annotations

import json
import math
import re

_JSON_OBJECT = re.compile(r"\{[^{}]*\}", re.DOTALL)
_NUMBER = r"([-+]?\d+(?:\.\d+)?)"
_LABELLED = re.compile(rf"(?:score|rating|grade)\s*[:=]?\s*\**\s*{_NUMBER}\s*(?:/\s*{_NUMBER}|%|out of\s*{_NUMBER})?",
                       re.IGNORECASE)  # fmt: skip
_FRACTION = re.compile(rf"{_NUMBER}\s*(?:/|out of)\s*{_NUMBER}", re.IGNORECASE)
_PERCENT = re.compile(rf"{_NUMBER}\s*%")
_BARE = re.compile(rf"^\s*\**\s*{_NUMBER}\s*\**\s*\.?\s*$")


def _normalize(value: float, out_of: float | None, scale: float) -> float | None:
    """Map ``value`` (out of ``out_of``, else the rubric's ``scale``) into [0, 1]; None if out of range."""
    denominator = out_of if out_of is not None else scale
    if not math.isfinite(value) or not math.isfinite(denominator) or denominator <= 0:
        return None
    if out_of is None and 0 < value <= 1 and scale != 1 and not float(value).is_integer():
        denominator = 1.0  # "0.85" on a 0-10 rubric is already a fraction
    score = value / denominator
    if score < 0 or score > 1:
        return None
    return round(score, 6)


def _from_json(text: str, scale: float) -> float | None:
    for match in reversed(_JSON_OBJECT.findall(text)):
        try:
            obj = json.loads(match)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        for name in ("score", "rating", "grade"):
            raw = obj.get(name)
            if isinstance(raw, bool):
                continue
            if isinstance(raw, int | float):
                return _normalize(float(raw), None, scale)
            if isinstance(raw, str):
                return parse_score(raw, scale)
    return None


def _pick(match: re.Match[str], scale: float) -> float | None:
    value = float(match.group(1))
    groups = [g for g in match.groups()[1:] if g is not None]
    text = match.group(0)
    if groups:
        return _normalize(value, float(groups[0]), scale)
    if text.rstrip().endswith("%"):
        return _normalize(value, 100.0, scale)
    return _normalize(value, None, scale)


def parse_score(text: str, scale: float = 10.0) -> float | None:  # noqa: PLR0911 - one exit per answer shape
    """The score in [0, 1] the text states, or None when there is none or it is ambiguous/out of range."""
    if not text or not text.strip():
        return None
    found = _from_json(text, scale)
    if found is not None:
        return found
    labelled = list(_LABELLED.finditer(text))
    if labelled:
        return _pick(labelled[-1], scale)  # the final "Score: x" wins over ones quoted in the reasoning
    fractions = _FRACTION.findall(text)
    if len(set(fractions)) == 1:
        value, out_of = fractions[0]
        return _normalize(float(value), float(out_of), scale)
    percents = _PERCENT.findall(text)
    if len(set(percents)) == 1:
        return _normalize(float(percents[0]), 100.0, scale)
    bare = _BARE.match(text)
    if bare:
        return _normalize(float(bare.group(1)), None, scale)
    return None
