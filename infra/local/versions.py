"""Every pinned version of the local platform, in one place."""

from __future__ import annotations

KAFKA_VERSION = "3.9.1"
KAFKA_SCALA_VERSION = "2.13"
SLF4J_RELOAD4J_VERSION = "1.7.36"
OPENSEARCH_VERSION = "2.19.6"
S3PROXY_VERSION = "2.9.0"
MIN_JAVA_MAJOR = 17
DEBIAN_SUITE = "bookworm"

KAFKA_PORT_CONTROLLER_OFFSET = 1
"""The KRaft controller listens on the broker port + this offset."""
OPENSEARCH_TRANSPORT_PORT_OFFSET = 100
"""OpenSearch's transport port is the HTTP port + this offset (9200 -> 9300)."""
#: MinIO server, built from the Go module proxy (``go install``) for the tests of S3 bucket policies: the local
#: S3 (s3proxy) has one identity and no policies.
MINIO_MODULE_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
