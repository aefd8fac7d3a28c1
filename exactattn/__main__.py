"""``python -m exactattn``: the same as the ``exactattn`` command."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
