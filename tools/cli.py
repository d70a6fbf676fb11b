"""What every command-line tool shares: reading and verifying input, atomic output, and
turning every failure into one line on stderr instead of a traceback: bad input is
`file:line:col: message` with exit code 2; an unexpected exception (a bug, or bad input
that was not verified) is `file: internal error (...)` with exit code 3, and with the
environment variable HLO_OPT_TRACEBACK=1 its traceback instead."""
from __future__ import annotations

import contextlib
import functools
import os
import stat
import sys
import tempfile

from .. import parse
from ..errors import HloError
from ..ir import Module

EXIT_ERROR = 2
EXIT_INTERNAL = 3
TRACEBACK_ENV = "HLO_OPT_TRACEBACK"


class InternalError(HloError):
    """An unexpected exception, reported as one line (exit code 3)."""


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
    """Write to stdout (None or `-`) or atomically to a file (write_atomically)."""
    if path in (None, "-"):
        sys.stdout.write(text)
        return
    write_atomically(path, text.encode("utf-8"))


def write_atomically(path: str, data: bytes) -> None:
    """A temporary file in the same folder renamed over the target, so a failure never
    leaves half a file behind; it gets the permissions a plain open() would give. A target
    that exists and is not a regular file (/dev/null, a FIFO, a terminal) is written as it
    is: renaming over it would replace the device with a file."""
    if _special(path):
        try:
            with open(path, "wb") as f:
                f.write(data)
        except OSError as e:
            raise HloError(f"cannot write: {e.strerror}", path) from None
        return
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".hlo-opt-", suffix=".tmp")
    except OSError as e:
        raise HloError(f"cannot write: {e.strerror}", path) from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise HloError(f"cannot write: {e.strerror}", path) from None
    except BaseException:
        os.unlink(tmp)
        raise


def _special(path: str) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False            # not there (or unreachable): the atomic path reports it


def load_module(path: str, verify: bool = True) -> tuple[Module, str]:
    """(module, its text) from `path`, parsed and unless told not to verified; errors name
    the file."""
    filename = input_name(path)
    text = read_text(path)
    module = parse(text, filename)
    if verify:
        from ..verifier import verify as verify_module
        with about(filename):
            verify_module(module)
    return module, text


def input_name(path: str) -> str:
    return "<stdin>" if path == "-" else path


@contextlib.contextmanager
def about(filename: str | None, verified: bool = True):
    """Errors raised inside concern `filename`: HloErrors without a file get it; running out
    of memory and unexpected exceptions become one-line errors on it (which, when the input
    was not `verified`, suggest verifying it)."""
    try:
        yield
    except HloError as e:
        e.filename = e.filename or filename
        raise
    except MemoryError as e:
        raise HloError(f"out of memory ({e or 'allocation failed'})", filename) from None
    except (KeyboardInterrupt, BrokenPipeError):
        raise
    except Exception as e:
        if os.environ.get(TRACEBACK_ENV):
            raise
        hint = "" if verified else "; the input was not verified: run without --no-verify"
        raise InternalError(f"internal error ({type(e).__name__}: {e}){hint}; set "
                            f"{TRACEBACK_ENV}=1 for the traceback", filename) from e


def main_guard(prog: str):
    """Decorator running a tool's main: HloError -> stderr line (`prog: message` when it
    names no file) + exit 2 (3 for internal errors); Ctrl-C -> exit 130."""
    return functools.partial(_guarded, prog=prog)


def _guarded(fn, prog: str):
    @functools.wraps(fn)
    def wrapper(argv=None):
        try:
            with about(prog):
                return fn(argv)
        except HloError as e:
            print(str(e), file=sys.stderr)
            return EXIT_INTERNAL if isinstance(e, InternalError) else EXIT_ERROR
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:
            return 0
    return wrapper
