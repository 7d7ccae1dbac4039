"""The local Kafka with authentication (``RS_KAFKA_AUTH=scram``): TLS certificates, SCRAM credentials, ACLs.

Why: production Kafka sits behind SASL and TLS, with a principal per client and ACLs; a pipeline tested only on an
open broker never meets a refused credential or a missing ACL. In this mode ``up`` makes, under
``<cache>/kafka-auth`` (0700; every secret file 0600):

- a local CA and a broker certificate for 127.0.0.1/localhost (openssl), the brokers' PEM key store;
- a random password per principal (``schemas.kafka_acls.principals``): the super user ``admin`` (brokers between
  themselves, ``up``'s own admin work) and one per role and per trainer;
- ``clients/<principal>.env``: the ``RS_KAFKA_*`` lines a client of that principal runs with.

Each broker's client listener is SASL_SSL with SCRAM-SHA-512 (the admin's SCRAM credential is written into the
storage at format time: KRaft brokers need it before the metadata log can be read); the KRaft controller listener
is SASL_SSL with PLAIN (controllers cannot use SCRAM: its credentials live in the metadata they serve). The
StandardAuthorizer denies whatever no ACL allows; ``provision`` writes every SCRAM user and the ACL table.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from infra.local.paths import PlatformPaths
from schemas.errors import PlatformError
from schemas.kafka_acls import ADMIN, Grant, acl_table, principals, trainer_names
from schemas.settings import Settings

MECHANISM = "SCRAM-SHA-512"
#: PBKDF2 iterations of every SCRAM credential (Kafka's minimum is 4096).
SCRAM_ITERATIONS = 8192
#: Days the local CA and broker certificate are valid; ``up`` makes new ones when they are about to end.
CERT_DAYS = 825
_CONTROLLER = "CONTROLLER"
_CLIENT = "SASL_SSL"
#: Characters of openssl's stderr, its end, that say why a certificate could not be made.
_OPENSSL_ERROR_CHARS = 300


def auth_dir(paths: PlatformPaths) -> Path:
    """Where the certificates and credentials of the local authenticated Kafka live."""
    return paths.root / "kafka-auth"


def _private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (created so: never a moment world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    path.chmod(0o600)


class KafkaAuth:
    """The files of one cache dir's authenticated Kafka, made on first use and kept."""

    def __init__(self, settings: Settings, paths: PlatformPaths) -> None:
        self._settings = settings
        self.root = auth_dir(paths)
        try:
            self.trainers = trainer_names(settings.local.kafka_trainers)
        except ValueError as exc:
            raise PlatformError(str(exc)) from exc

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    @property
    def keystore(self) -> Path:
        """The brokers' private key and certificate chain, one PEM file (Kafka's ``ssl.keystore.type=PEM``)."""
        return self.root / "broker.pem"

    @property
    def credentials(self) -> Path:
        return self.root / "credentials.json"

    def client_file(self, principal: str) -> Path:
        return self.root / "clients" / f"{principal}.env"

    def principals(self) -> tuple[str, ...]:
        return principals(self.trainers)

    def grants(self) -> tuple[Grant, ...]:
        return acl_table(self._settings.kafka.topic_prefix, self.trainers)

    def ensure(self, hosts: Iterable[str]) -> dict[str, str]:
        """Certificates and every principal's password, made if missing; the passwords by principal."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o700)
        if not self.ca.exists() or not self.keystore.exists():
            self._make_certificates(sorted(set(hosts) | {"127.0.0.1", "localhost"}))
        passwords = self.passwords()
        added = {name: secrets.token_hex(24) for name in self.principals() if name not in passwords}
        if added:
            passwords |= added
            _private(self.credentials, json.dumps(passwords, indent=1, sort_keys=True) + "\n")
        (self.root / "clients").mkdir(exist_ok=True)
        for name in self.principals():
            _private(self.client_file(name), "".join(f"{k}={v}\n" for k, v in self.client_env(name, passwords).items()))
        return passwords

    def passwords(self) -> dict[str, str]:
        """The kept passwords (none yet: empty)."""
        if not self.credentials.exists():
            return {}
        loaded: dict[str, str] = json.loads(self.credentials.read_text())
        return loaded

    def client_env(self, principal: str, passwords: Mapping[str, str]) -> dict[str, str]:
        """The ``RS_KAFKA_*`` settings a client of ``principal`` runs with."""
        return {
            "RS_KAFKA_SECURITY_PROTOCOL": _CLIENT,
            "RS_KAFKA_SASL_MECHANISM": MECHANISM,
            "RS_KAFKA_SASL_USERNAME": principal,
            "RS_KAFKA_SASL_PASSWORD": passwords[principal],
            "RS_KAFKA_SSL_CA_LOCATION": str(self.ca),
        }

    def client_config(self, principal: str, bootstrap: str) -> dict[str, str]:
        """librdkafka's config for ``principal`` at ``bootstrap`` (the password from the kept credentials)."""
        passwords = self.passwords()
        if principal not in passwords:
            raise PlatformError(f"no credentials for Kafka principal {principal!r} in {self.credentials}: run `up`")
        return {
            "bootstrap.servers": bootstrap,
            "security.protocol": _CLIENT,
            "sasl.mechanism": MECHANISM,
            "sasl.username": principal,
            "sasl.password": passwords[principal],
            "ssl.ca.location": str(self.ca),
        }

    def server_properties(self, host: str, port: int, controller_port: int) -> dict[str, str]:
        """What a node's ``server.properties`` has in this mode instead of (and on top of) the open listeners."""
        admin = self.passwords()[ADMIN]
        return {
            "listeners": f"{_CLIENT}://{host}:{port},{_CONTROLLER}://{host}:{controller_port}",
            "advertised.listeners": f"{_CLIENT}://{host}:{port}",
            "inter.broker.listener.name": _CLIENT,
            "listener.security.protocol.map": f"{_CONTROLLER}:SASL_SSL,{_CLIENT}:SASL_SSL",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule"
            f' required username="{ADMIN}" password="{admin}" user_{ADMIN}="{admin}";',
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram."
            f'ScramLoginModule required username="{ADMIN}" password="{admin}";',
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "ssl.client.auth": "none",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def format_arguments(self) -> list[str]:
        """``kafka-storage format``'s arguments that bootstrap the admin's SCRAM credential."""
        return ["--add-scram", f"{MECHANISM}=[name={ADMIN},password={self.passwords()[ADMIN]}]"]

    def redact(self, text: str) -> str:
        """``text`` with every kept password replaced (a tool's output said back in an error)."""
        for password in self.passwords().values():
            text = text.replace(password, "***")
        return text

    def _make_certificates(self, hosts: list[str]) -> None:
        ca_key, key, csr, cert = (self.root / name for name in ("ca.key", "broker.key", "broker.csr", "broker.crt"))
        names = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}" for h in hosts)
        extensions = self.root / "broker.ext"
        extensions.write_text(f"subjectAltName={names}\nextendedKeyUsage=serverAuth,clientAuth\n")
        days = str(CERT_DAYS)
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(self.ca),
                 "-days", days, "-subj", "/CN=rewardstream local Kafka CA",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
                 "-subj", "/CN=localhost")  # fmt: skip
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(ca_key), "-CAcreateserial",
                 "-out", str(cert), "-days", days, "-extfile", str(extensions))  # fmt: skip
        for private in (ca_key, key):
            private.chmod(0o600)
        _private(self.keystore, key.read_text() + cert.read_text())
        self.ca.chmod(0o644)

    def provision(self, bootstrap: str, report: Callable[[str], None], timeout_s: float = 30.0) -> None:
        """Every principal's SCRAM credential and the ACL table, written with the admin's (both idempotent)."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialAlteration,
            UserScramCredentialUpsertion,
        )

        admin = AdminClient({**self.client_config(ADMIN, bootstrap), "log_level": 3})
        passwords = self.passwords()
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
        upserts: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(name, info, passwords[name].encode(), secrets.token_bytes(16))
            for name in self.principals()
            if name != ADMIN
        ]
        for user, future in admin.alter_user_scram_credentials(upserts, request_timeout=timeout_s).items():
            _result(future, f"SCRAM credential of {user}", timeout_s)
        bindings = [_binding(grant) for grant in self.grants()]
        for binding, future in admin.create_acls(bindings, request_timeout=timeout_s).items():
            _result(future, f"ACL {binding}", timeout_s)
        report(f"kafka: SASL/SCRAM over TLS, {len(bindings)} ACLs; credentials of each principal in "
               f"{self.root / 'clients'}/<principal>.env (0600): {', '.join(self.principals())}")  # fmt: skip


def _result(future: Any, what: str, timeout_s: float) -> None:
    try:
        future.result(timeout=timeout_s)
    except Exception as exc:
        raise PlatformError(f"writing the {what} failed: {exc}") from exc


def _binding(grant: Grant) -> Any:
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    resource = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
                "transactional_id": ResourceType.TRANSACTIONAL_ID}[grant.resource]  # fmt: skip
    pattern = ResourcePatternType.PREFIXED if grant.pattern == "prefixed" else ResourcePatternType.LITERAL
    operation = getattr(AclOperation, grant.operation.upper())
    return AclBinding(resource, grant.name, pattern, f"User:{grant.principal}", "*", operation, AclPermissionType.ALLOW)


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False, timeout=60)
    if result.returncode != 0:
        said = result.stderr[-_OPENSSL_ERROR_CHARS:]
        raise PlatformError(f"openssl {args[0]} failed making the local Kafka's certificates: {said}")
