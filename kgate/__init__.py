"""kgate: an asynchronous Kafka-protocol proxy with a filter chain and topic-id resolution.

Everything kgate installs lives under this one namespace, so nothing generic (``config``,
``proxy``) lands at the top of site-packages. The repository keeps its historical top-level
folders (``codec/``, ``config/``, ``filters/``, ``proxy/``); ``kgate/`` links them in (see
docs/architecture.md, "Layout"). Filter plugins import from :mod:`kgate.api` only.
"""

__version__ = "0.1.0"
