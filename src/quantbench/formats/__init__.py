"""Variant formats: one module per format, from recipe and quantizer to detection and byte model.

See :mod:`quantbench.formats.base` for the contract and :mod:`quantbench.formats.registry` for how
formats are found.
"""
