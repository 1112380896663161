"""One exception type for every mistake a user can make: a :class:`PapaError` says what is wrong and what to do; the
CLI prints it on one line (no traceback) and exits with status 2."""

from __future__ import annotations


class PapaError(ValueError):
    """A user-facing error (bad input, missing files, mismatched artefacts): ``str(err)`` is ``"<problem>. <hint>"``."""

    def __init__(self, problem: str, hint: str | None = None):
        self.problem = problem.rstrip(".")
        self.hint = hint
        super().__init__(self.problem + "." + (f" {hint}" if hint else ""))


class UnsupportedArchitectureError(PapaError):
    """The model's architecture has no entry in the adapter table."""


class ConstantsMismatchError(PapaError):
    """A constants file does not fit the model, length or layout it is used with."""


class CorruptFileError(PapaError):
    """A file written by papa fails its checksum or shape checks."""


class DataError(PapaError):
    """Task data is missing or malformed."""


class ResourceBudgetError(PapaError):
    """A configuration would exceed the configured memory budget."""
