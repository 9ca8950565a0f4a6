"""Helpers for kgate's end-to-end tests: ports, processes (Tansu, kgate, relays),
/proc socket inspection and a tiny hand-built Kafka request builder."""
