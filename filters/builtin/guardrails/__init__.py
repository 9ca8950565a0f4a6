"""The ``guardrails`` filter: bounds that keep a broker safe, checked before it sees a request."""
