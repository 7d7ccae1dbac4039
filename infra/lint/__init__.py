"""Checks of the source tree that ruff, mypy and import-linter cannot express; ``make lint`` runs them."""
