"""How the real services start: locally from this repo, and in production."""
