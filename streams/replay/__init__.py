"""Replay generations through the pipeline in an isolated namespace and diff the rewards."""
