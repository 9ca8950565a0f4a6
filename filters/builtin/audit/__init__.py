"""The ``audit-log`` filter: capturing exchanges, building events, writing files and the Kafka sink."""
