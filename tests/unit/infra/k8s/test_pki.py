"""Certificates verify against their CA with the names clients use; every identity has a kubeconfig."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from infra.k8s.pki import make_pki

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


def test_certificates_chain_and_name_loopback(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki", apiserver_port=16443, node_name="vm")
    ca, front = pki.path("ca.crt"), pki.path("front-proxy-ca.crt")
    for cert, issuer in (("apiserver.crt", ca), ("kubelet-client.crt", ca), ("front-proxy-client.crt", front)):
        assert _openssl("verify", "-CAfile", str(issuer), str(pki.path(cert))).strip().endswith("OK")
    assert _openssl("verify", "-CAfile", str(ca), str(pki.keda_certs / "tls.crt")).strip().endswith("OK")
    apiserver = _openssl("x509", "-in", str(pki.path("apiserver.crt")), "-noout", "-ext", "subjectAltName")
    assert "IP Address:127.0.0.1" in apiserver
    assert "DNS:localhost" in apiserver
    kubelet_client = _openssl("x509", "-in", str(pki.path("kubelet-client.crt")), "-noout", "-subject")
    assert "O = system:masters" in kubelet_client
    keda = _openssl("x509", "-in", str(pki.keda_certs / "tls.crt"), "-noout", "-ext", "extendedKeyUsage")
    assert "TLS Web Server Authentication" in keda
    assert "TLS Web Client Authentication" in keda


def test_one_token_and_kubeconfig_per_identity(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki", apiserver_port=16443, node_name="vm")
    rows = list(csv.reader(pki.path("tokens.csv").read_text().splitlines()))
    users = {row[1]: row for row in rows}
    assert users["system:node:vm"][3] == "system:nodes"
    assert len({row[0] for row in rows}) == len(rows) == 5  # distinct tokens
    for identity in ("admin", "controller-manager", "scheduler", "keda", "node"):
        config = json.loads(pki.kubeconfig(identity).read_text())
        assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:16443"
        assert config["users"][0]["user"]["token"] in {row[0] for row in rows}
    assert oct(pki.path("sa.key").stat().st_mode & 0o777) == "0o600"
