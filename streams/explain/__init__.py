"""``explain``: one generation's whole story, from the topics, the policy and the logs."""
