"""Log shipping (workers emit LogRecords to the ``logs`` topic) and indexing (``logs`` -> OpenSearch)."""
