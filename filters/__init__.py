"""kgate's filter runtime (the chain, the registry) and its built-in filters.

Plugins do not import from here: the public API is :mod:`kgate.api`, and the built-in filters
use only that API, like any plugin.
"""
