"""``python -m proxy ...`` is the same as the ``kgate`` command."""

import sys

from proxy.cli import main

if __name__ == "__main__":
    sys.exit(main())
