"""``python -m kgate ...`` is the same as the ``kgate`` command."""

import sys

from kgate.proxy.runtime.cli import main

if __name__ == "__main__":
    sys.exit(main())
