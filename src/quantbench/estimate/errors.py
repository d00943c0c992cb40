"""Errors a user of the estimator can fix, in the project's ``UserError`` family.

They also subclass the matching built-in (``ValueError``, ``FileNotFoundError``) so pydantic
validators accept them and callers that catch the built-ins keep working.
"""

from __future__ import annotations

from quantbench.errors import UserError


class EstimateInputError(UserError, ValueError):
    """A value the estimator cannot use; the message names it and what is allowed."""


class MissingInputError(UserError, FileNotFoundError):
    """A file or folder the estimate needs does not exist; the message names it."""
