"""Shared confluent-kafka helpers for every worker: client builders, error wrapping, dead-letter publishing."""
