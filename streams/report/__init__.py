"""``rewardstream report``: one run's rewards as a self-contained HTML page (gather, read, charts, page)."""
