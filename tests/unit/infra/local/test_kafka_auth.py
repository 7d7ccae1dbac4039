"""The local authenticated Kafka's files: a CA and broker certificate made by openssl, a password per principal,
every secret 0600, and server properties that name the files (no Kafka here)."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

from infra.local.kafka_auth import KafkaAuth
from infra.local.paths import PlatformPaths
from schemas.settings import Settings


def _auth(tmp_path: Path) -> KafkaAuth:
    settings = Settings(cache_dir=tmp_path, kafka_auth="scram", kafka_trainers="t1,t2")
    return KafkaAuth(settings, PlatformPaths(tmp_path))


def test_files_are_made_once_and_kept_private(tmp_path: Path) -> None:
    auth = _auth(tmp_path)
    passwords = auth.ensure(["127.0.0.1"])
    roles = {"executor", "verifier", "judge", "rewards", "episode", "auditor", "indexer", "gateway", "operator"}
    assert set(passwords) == {"admin", *roles, "t1", "t2"}
    assert len(set(passwords.values())) == len(passwords)
    assert auth.ensure(["127.0.0.1"]) == passwords  # kept, not made again
    for private in [auth.credentials, auth.keystore, *(auth.root / "clients").glob("*.env")]:
        assert stat.S_IMODE(private.stat().st_mode) == 0o600, private
    cert = str(auth.root / "broker.crt")
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(auth.ca), cert], capture_output=True, text=True, check=False
    )
    assert verified.returncode == 0, verified.stderr
    names = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", cert],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "IP Address:127.0.0.1" in names
    assert "DNS:localhost" in names
    env = auth.client_file("t1").read_text()
    assert "RS_KAFKA_SASL_USERNAME=t1\n" in env
    assert f"RS_KAFKA_SSL_CA_LOCATION={auth.ca}\n" in env


def test_server_properties_and_redaction(tmp_path: Path) -> None:
    auth = _auth(tmp_path)
    passwords = auth.ensure(["127.0.0.1"])
    lines = auth.server_properties("127.0.0.1", 19092, 19093)
    assert lines["listeners"] == "SASL_SSL://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert lines["super.users"] == "User:admin"
    assert lines["ssl.keystore.location"] == str(auth.keystore)
    assert "admin" in auth.format_arguments()[1]
    said = auth.redact(f"format failed: {auth.format_arguments()[1]}")
    assert passwords["admin"] not in said


def test_storage_formatted_open_is_not_started_with_auth(tmp_path: Path) -> None:
    """The super user's credential is written at format time: an open broker's storage cannot turn secure."""
    import pytest

    from infra.local.kafka import KafkaService
    from schemas.errors import PlatformError

    settings = Settings(cache_dir=tmp_path, kafka_auth="scram", kafka_bootstrap="127.0.0.1:19992")
    service = KafkaService(settings, PlatformPaths(tmp_path))
    node = service.nodes[0]
    node.log_dir.mkdir(parents=True)
    (node.log_dir / "meta.properties").write_text("formatted open\n")
    with pytest.raises(PlatformError, match="formatted with RS_KAFKA_AUTH=none, not scram"):
        service._format_storage(Path("/bin/false"), node)
