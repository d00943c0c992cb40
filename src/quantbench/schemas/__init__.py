"""One versioned schema per stage output: the writer's model is the reader's.

Each module describes one output (its docstring says which file, which stage writes it, and what
it holds); :mod:`quantbench.schemas.io` writes and reads them (migrating older versions where a
migration exists); :mod:`quantbench.schemas.catalog` lists them all. This package imports none
of its modules here, so a stage that writes one output depends only on that output's schema.
"""
