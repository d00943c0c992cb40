"""Engines: one module per serving engine (what it serves, how it starts) and one server lifecycle."""
