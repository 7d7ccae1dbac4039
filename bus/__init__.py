"""The Kafka layer under ``workers`` and ``streams``: client configs, error wrapping, the topic admin,
dead letters, partition readers and the changelog. It depends only on ``schemas`` and confluent-kafka."""
