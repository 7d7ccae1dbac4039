"""The three stateless worker roles on ``generations``: executor, verifier, judge (see ``workers.runtime``)."""
