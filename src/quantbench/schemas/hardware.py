"""Parts of the machine profile (``schemas.machine``) that the engines measure and declare.

An engine's per-step overhead is measured by the engine itself (its ``measure_overhead``) and
stored in the machine profile beside the CPU's figures, so it is a schema part, below both the
engines that write it and the estimator that reads it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EngineOverhead(BaseModel):
    """Fixed cost per forward step of a serving engine, measured on this machine.

    ``per_step_ms + layers * per_layer_ms`` is what a step costs beyond its roofline time:
    Python, op dispatch, sampling. Measured with a tiny model whose matmuls cost nothing.
    """

    model_config = ConfigDict(extra="forbid")

    per_layer_ms: float = Field(ge=0)
    per_step_ms: float = Field(ge=0)
    version: str = Field(description="engine (library) version measured")
    method: str
