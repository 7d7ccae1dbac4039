"""Image tasks in their containers: verification and the reward its verifier wrote."""
