"""The command line, `quantbench <command>`: the top layer, which may build on every package.

:mod:`.main` parses the command and hands it to its module: `load` (:mod:`.load`), `plan`
(:mod:`.plan`), `estimate` (:mod:`.estimate`), `export` and `import` (:mod:`.exchange`),
`gather` (:mod:`.gather`); `validate`, `pairs`, `serve` and `mock-server` are small enough to
live in :mod:`.main`.
"""

from quantbench.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
