"""Judges score code on a rubric: a deterministic built-in rubric (local default) or an OpenAI-compatible server."""
