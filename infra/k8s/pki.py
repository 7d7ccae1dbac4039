"""The cluster's certificates, tokens and kubeconfigs, made fresh by ``up`` with openssl.

One CA signs the apiserver's serving cert, the apiserver's client cert to the kubelet (system:masters) and
KEDA's gRPC cert (operator <-> adapter mTLS); a second CA signs the front-proxy client cert the aggregator
presents to KEDA's metrics API. Components authenticate to the apiserver with static tokens, one identity each.
"""

from __future__ import annotations

import csv
import io
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from schemas.errors import PlatformError

CERT_DAYS = 30
"""A local cluster lives for minutes; a month is plenty and expires on its own."""

#: (user name, groups) of each static token identity; the kubeconfig file is named after the key.
IDENTITIES = {
    "admin": ("rs-admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", ""),
    "scheduler": ("system:kube-scheduler", ""),
    "keda": ("rs-keda", "system:masters"),
}


@dataclass(frozen=True)
class Pki:
    """Paths of what ``make_pki`` wrote into ``directory``."""

    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    def kubeconfig(self, identity: str) -> Path:
        return self.directory / f"{identity}.kubeconfig"

    @property
    def keda_certs(self) -> Path:
        """ca.crt, tls.crt, tls.key: the layout KEDA's --cert-dir expects."""
        return self.directory / "keda"


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PlatformError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _ca(directory: Path, name: str, subject: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", str(CERT_DAYS),
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", subject,
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip


def _leaf(directory: Path, name: str, ca: str, subject: str, *, usage: str, sans: str = "") -> None:
    """A key and a cert signed by ``ca``; ``usage`` is the extendedKeyUsage, ``sans`` the subjectAltName."""
    extensions = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
    extensions.append(f"extendedKeyUsage={usage}")
    if sans:
        extensions.append(f"subjectAltName={sans}")
    (directory / f"{name}.ext").write_text("\n".join(extensions) + "\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject, cwd=directory)  # fmt: skip
    _openssl(
        "x509", "-req", "-sha256", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", str(CERT_DAYS), "-out", f"{name}.crt", "-extfile", f"{name}.ext",
        cwd=directory,
    )  # fmt: skip
    (directory / f"{name}.csr").unlink()
    (directory / f"{name}.ext").unlink()


def kubeconfig_text(server: str, ca_file: Path, user: str, token: str) -> str:
    """A kubeconfig with one cluster, one token user and one context (JSON is valid YAML)."""
    import json

    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "rs-local", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "rs-local", "context": {"cluster": "rs-local", "user": user}}],
            "current-context": "rs-local",
        },
        indent=2,
    )


def make_pki(directory: Path, *, apiserver_port: int, node_name: str) -> Pki:
    """Write fresh certificates, tokens and one kubeconfig per identity (the node's included)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    _ca(directory, "ca", "/CN=rewardstream-local-ca")
    _ca(directory, "front-proxy-ca", "/CN=rewardstream-local-front-proxy-ca")
    _leaf(directory, "apiserver", "ca", "/CN=kube-apiserver", usage="serverAuth",
          sans="IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
          "DNS:kubernetes.default.svc")  # fmt: skip
    _leaf(directory, "kubelet-client", "ca", "/O=system:masters/CN=kube-apiserver-kubelet-client", usage="clientAuth")
    _leaf(directory, "front-proxy-client", "front-proxy-ca", "/CN=front-proxy-client", usage="clientAuth")
    keda = directory / "keda"
    keda.mkdir(exist_ok=True)
    _leaf(directory, "keda-tls", "ca", "/CN=keda", usage="serverAuth,clientAuth", sans="IP:127.0.0.1,DNS:localhost")
    (keda / "ca.crt").write_bytes((directory / "ca.crt").read_bytes())
    (directory / "keda-tls.crt").replace(keda / "tls.crt")
    (directory / "keda-tls.key").replace(keda / "tls.key")
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    identities = {**IDENTITIES, "node": (f"system:node:{node_name}", "system:nodes")}
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    server = f"https://127.0.0.1:{apiserver_port}"
    for name, (user, groups) in identities.items():
        token = secrets.token_hex(24)
        writer.writerow([token, user, user] + ([groups] if groups else []))
        (directory / f"{name}.kubeconfig").write_text(kubeconfig_text(server, directory / "ca.crt", user, token))
    (directory / "tokens.csv").write_text(rows.getvalue())
    for path in directory.rglob("*"):
        if path.is_file():
            path.chmod(0o600)
    return Pki(directory)
