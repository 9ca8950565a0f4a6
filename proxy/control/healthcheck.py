"""``kgate healthcheck`` and ``kgate reload``: ask a running kgate's admin listener.

``healthcheck`` GETs ``/readyz`` (exit 0 if ready, 1 if not); ``reload`` POSTs ``/reload``
(exit 0 if the new configuration is in force, 1 if it was refused and the old one stays).

For container HEALTHCHECKs and exec probes in images without curl (python:slim): it uses only
the standard library's urllib. The address comes from the same config file the proxy runs with
(``admin.listen``; a wildcard listen address is asked on loopback), so the image's health check
follows the config instead of repeating a port.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from kgate.config import KgateConfig
from kgate.config.model import WILDCARD_HOSTS

DEFAULT_URL = "http://127.0.0.1:9190/readyz"


def readyz_url(config: KgateConfig, path: str = "/readyz") -> str | None:
    """Where this config's admin listener answers ``path``; None when it has no admin listener."""
    listen = config.admin.listen
    if listen is None:
        return None
    host = listen.host
    if host in WILDCARD_HOSTS:
        host = "::1" if host == "::" else "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{listen.port}{path}"


def endpoint_url(url: str, path: str) -> str:
    """``url`` as given, or with ``path`` appended when it names only the admin listener.

    Operators copy the admin listener's base address (``http://host:9190``); making them also know
    each command's path turned a working address into a 404.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.path in ("", "/"):
        return urllib.parse.urlunsplit(parts._replace(path=path))
    return url


def readable(text: str) -> str:
    """A /readyz or /reload answer as lines a person reads; JSON answers flattened to ``key: value``."""
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if not isinstance(data, dict):
        return text
    return "".join(
        f"{key}: {value if not isinstance(value, (dict, list)) else json.dumps(value)}\n" for key, value in data.items()
    )


def check(url: str, timeout_s: float, method: str = "GET") -> tuple[bool, str]:
    """(a 200 answer, what the endpoint or the connection attempt said)."""
    try:
        request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            return resp.status == 200, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return False, exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        return False, f"{url}: {getattr(exc, 'reason', exc)}\n"
