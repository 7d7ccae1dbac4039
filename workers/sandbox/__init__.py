"""Sandboxes that run untrusted code: one interface (``run(spec) -> result``), several backends."""
