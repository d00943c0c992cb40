"""`python -m quantbench.cli`: the same as the `quantbench` command."""

import sys

from quantbench.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
