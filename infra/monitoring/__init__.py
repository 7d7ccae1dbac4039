"""Monitoring of the local pipeline: Prometheus and Alertmanager (Debian packages), their configs, the alerts."""
