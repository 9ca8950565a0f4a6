"""The process: virtual clusters and their listeners, the server, reload, workers, the CLI."""
