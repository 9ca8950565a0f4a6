"""The ``quotas`` filter: Kafka-style produce, fetch, request and connection quotas at the proxy."""
