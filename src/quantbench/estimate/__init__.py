"""Roofline estimator: what a model variant should cost on a piece of hardware.

From a model's ``config.json``, a variant's weight format and a hardware description this
package derives FLOPs and bytes for prefill and decode, the bottleneck of each phase, TTFT,
ITL and throughput per concurrency, three concurrency limits, suggested sweep grids per
engine, and (when measurements exist) the estimate beside the measurement.

The entry points are :func:`quantbench.estimate.stage.estimate_variant` (a JSON-ready dict
for the DVC stage) and :mod:`quantbench.cli.estimate` (the ``quantbench estimate`` command).
See ``docs/ESTIMATE.md`` for the method.
"""
