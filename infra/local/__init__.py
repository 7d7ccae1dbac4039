"""The local embedded platform: Kafka, OpenSearch, S3 and Docker on loopback, from Maven Central and Debian."""
