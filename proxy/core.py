"""The connection core under its short name: ``kgate.proxy.core`` is ``kgate.proxy.sansio.core``.

The core moved into ``proxy/sansio/`` with the other sans-IO modules; this path stays because
filter authors, tests and the docs of earlier releases import it, and because importing it must
stay as cheap and asyncio-free as importing the core itself (the layering test checks both).
"""

from kgate.proxy.sansio.core import Actions, ConnectionCore, NoActions, Suspension

__all__ = ["Actions", "ConnectionCore", "NoActions", "Suspension"]
