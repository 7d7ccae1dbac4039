"""Audits: a sample of verdicts re-graded on the other sandbox backend, disagreements recorded and counted."""
