"""The one error type every stage raises for bad input: a message with a source position."""
from __future__ import annotations


class HloError(Exception):
    """Bad input (HLO text, rule file, shapes). Printed as `file:line:col: message`.

    `line` and `column` are 1-based; 0 means unknown (e.g. an instruction the optimizer built).
    """

    def __init__(self, message: str, filename: str | None = None, line: int = 0, column: int = 0):
        super().__init__(message)
        self.message = message
        self.filename = filename
        self.line = line
        self.column = column

    def __str__(self) -> str:
        where = self.filename or "<input>"
        if self.line:
            where += f":{self.line}:{self.column}"
        return f"{where}: {self.message}"


class UnsupportedError(HloError):
    """Well-formed input that a stage does not handle (e.g. custom-call in the interpreter)."""
