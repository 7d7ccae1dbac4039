"""The final stage's WORKDIR, read from the Dockerfile without building it (the bases: test_task_images)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.images.dockerfile import TaskImageError, final_workdir


@pytest.mark.parametrize(
    ("text", "workdir"),
    [
        ("FROM python:3.11-slim\nWORKDIR /app\n", "/app"),
        ("FROM debian:bookworm-slim\n", None),
        ("FROM x\nWORKDIR /a\nWORKDIR b\nWORKDIR ../c/./d\n", "/a/c/d"),
        ('FROM x\nWORKDIR ["/srv/app"]\n', "/srv/app"),
        ("FROM x AS build\nWORKDIR /build\nFROM debian:bookworm-slim\nCOPY --from=build /out /out\n", None),
        ("FROM x AS base\nWORKDIR /base\nFROM base\nRUN true\n", "/base"),
        ("FROM x AS base\nWORKDIR /base\nFROM base AS two\nWORKDIR sub\nFROM two\n", "/base/sub"),
        ("# a comment\nFROM --platform=linux/amd64 x\nRUN echo a \\\n  && echo b\nWORKDIR /w\n", "/w"),
        ("# escape=`\nFROM x\nRUN echo `\n  b\nWORKDIR /w\n", "/w"),
        ("FROM x\nWORKDIR //app//\n", "/app"),
    ],
)
def test_the_final_stage_workdir(text: str, workdir: str | None) -> None:
    assert final_workdir(text) == workdir


@pytest.mark.parametrize(
    ("text", "named"), [("FROM x\nWORKDIR $HOME/app\n", "set [environment] workdir"), ("RUN true\n", "no FROM")]
)
def test_what_cannot_be_told_without_building_is_said(text: str, named: str) -> None:
    with pytest.raises(TaskImageError, match=named.replace("[", r"\[").replace("]", r"\]")):
        final_workdir(text)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('FROMWORKDIR \n\\/$.[]"#`=abAS-')), max_size=200))
def test_any_dockerfile_gives_a_workdir_or_a_dockerfile_error(text: str) -> None:
    try:
        workdir = final_workdir(text)
    except TaskImageError:
        return
    assert workdir is None or workdir.startswith("/")
