"""The three stateless worker roles on ``generations``: executor, verifier, judge (``workers.transactional_loop``)."""
