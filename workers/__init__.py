"""Stateless Kafka workers: sandboxes, grading, judges, logs and artifacts."""
