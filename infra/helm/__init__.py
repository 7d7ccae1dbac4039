"""The Helm chart's tooling: the KafkaTopic template generated from the topic catalog, and ``deploy-check``."""
