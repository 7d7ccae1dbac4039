"""The reward processor: a pure join/decision core (``join``, ``policy``, ``processor``) and two engines that
run it on Kafka: ``kafka_engine`` (transactions; the default) and the ``faust`` package (faust-streaming)."""
