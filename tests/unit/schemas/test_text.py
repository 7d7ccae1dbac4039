"""Text from untrusted sources is made safe to store: no lone surrogate survives, clean text is untouched."""

from __future__ import annotations

import orjson
import pytest

from schemas.text import REPLACEMENT, is_clean_text, sanitize_json, sanitize_text


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        ("plain", "plain"),
        ("é ü 漢 \U0001f600", "é ü 漢 \U0001f600"),
        ("\ud800", REPLACEMENT),
        ("a\udfffb", f"a{REPLACEMENT}b"),
        ("\ud83d\ude00", REPLACEMENT * 2),  # a pair of lone surrogates is not a character in a Python str
        (REPLACEMENT * 3, REPLACEMENT * 3),
    ],
)
def test_lone_surrogates_become_the_replacement_character(text: str, clean: str) -> None:
    assert sanitize_text(text) == clean
    assert is_clean_text(clean)
    orjson.dumps(clean)


def test_clean_text_is_returned_as_is() -> None:
    text = "nothing to repair ü"
    assert sanitize_text(text) is text
    assert is_clean_text(text)
    assert not is_clean_text("x\ud800")


def test_json_values_are_sanitized_keys_included() -> None:
    value = {"\ud800": ["a\udfff", 1, None, {"k": "\udc00"}], "ok": True}
    clean = sanitize_json(value)
    assert clean == {REPLACEMENT: [f"a{REPLACEMENT}", 1, None, {"k": REPLACEMENT}], "ok": True}
    orjson.dumps(clean)
    deep: object = "x"
    for _ in range(300):
        deep = [deep]
    orjson.dumps(sanitize_json(deep))  # bounded: what is deeper than max_depth becomes None
