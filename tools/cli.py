"""What every command-line tool shares: reading input, atomic output, and turning bad input
into one `file:line:col: message` line with exit code 2 instead of a traceback."""
from __future__ import annotations

import functools
import os
import sys
import tempfile

from ..errors import HloError

EXIT_ERROR = 2


def read_text(path: str) -> str:
    """Contents of `path` (`-` is stdin); unreadable files become HloError."""
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise HloError(f"not UTF-8 text ({e.reason} at byte {e.start})", path) from None
    except OSError as e:
        raise HloError(f"cannot read: {e.strerror}", path) from None


def write_text(path: str | None, text: str) -> None:
    """Write to stdout (None or `-`) or atomically to a file: a temporary file in the same
    folder renamed over the target, so a failure never leaves half a file behind."""
    if path in (None, "-"):
        sys.stdout.write(text)
        return
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".hlo-opt-", suffix=".tmp")
    except OSError as e:
        raise HloError(f"cannot write: {e.strerror}", path) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main_guard(fn):
    """Run a tool's main: HloError -> stderr line + exit 2; Ctrl-C -> exit 130."""
    @functools.wraps(fn)
    def wrapper(argv=None):
        try:
            return fn(argv)
        except HloError as e:
            print(str(e), file=sys.stderr)
            return EXIT_ERROR
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:
            return 0
    return wrapper
