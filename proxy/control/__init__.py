"""The control plane: metrics, logs, the admin listener, readiness and the healthcheck."""
