"""rs-as-agent as installed: root's script, run as the agent uid (its effect is shown on docker in
tests/sandbox/test_image_tasks.py)."""

from __future__ import annotations

import io
import tarfile

from workers.containers.as_agent import AGENT_ID, install_tar, prepare_script


def test_the_installed_script_switches_to_the_agent_uid() -> None:
    with tarfile.open(fileobj=io.BytesIO(install_tar())) as tar:
        (member,) = tar.getmembers()
        source = tar.extractfile(member)
        assert source is not None
        text = source.read().decode()
    assert (member.name, member.mode, member.uid) == ("rs-as-agent", 0o755, 0)
    assert text.startswith("#!/bin/sh\n")
    assert f"setpriv --reuid={AGENT_ID} --regid={AGENT_ID} --clear-groups" in text


def test_the_workdir_is_quoted() -> None:
    assert prepare_script("/app dir/x'y") == "chown -R 65534:65534 -- '/app dir/x'\"'\"'y'"
