"""The strict model every stage output and each of its parts is made of: unknown fields refused.

Below the schemas (``quantbench.schemas.base`` builds the versioned files on it) and below the
statistics (``quantbench.precision``'s figures are parts the schemas store), so neither imports
the other's package to share it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class Strict(BaseModel):
    """A part of a stage output: unknown fields are refused.

    ``OMIT_WHEN_NONE`` names optional fields that the file leaves out, rather than writing null,
    when they do not apply (an adopted adapter has no training losses).
    """

    # "constants": an infinite figure (a percentile over requests that were never answered) is
    # written as Infinity and read back as such, never turned into null.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_when_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in self.OMIT_WHEN_NONE:
            if key in data and data[key] is None:
                del data[key]
        return data
