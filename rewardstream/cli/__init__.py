"""CLI commands."""
