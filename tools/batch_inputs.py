"""Which files `hlo-opt batch` optimizes, and the output name of each.

A folder is read as it is: when it holds files named `*.before_optimizations.txt` it is an
XLA dump folder (`--xla_dump_to`), whose modules are those files, the HLO XLA was given;
everything else there (`*after_optimizations*.txt`, `*.ll`, `*.o`, buffer assignments,
sub-folders) is XLA's own output and is not read. Any other folder contributes its `*.hlo`
files. Neither kind is searched recursively. A file named on the command line is taken
whatever its name; a quoted glob is expanded here (`**` included), each match being a file
or a folder as above. Files inside the output folder are never inputs.
"""
from __future__ import annotations

import glob
import hashlib
import os

from ..errors import HloError

DUMP_SUFFIX = ".before_optimizations.txt"
PLAIN_SUFFIX = ".hlo"


def find_modules(specs: list[str], outdir: str) -> list[str]:
    """The module files `specs` (files, folders, globs) name, in order, each once."""
    out, seen = [], set()
    skip = os.path.realpath(outdir)
    for spec in specs:
        for path in _expand(spec):
            for module in modules_in_folder(path) if os.path.isdir(path) else [path]:
                real = os.path.realpath(module)
                if real not in seen and os.path.dirname(real) != skip:
                    seen.add(real)
                    out.append(module)
    if not out:
        raise HloError(f"no HLO modules in {' '.join(specs)} (a folder needs *{DUMP_SUFFIX} "
                       f"files, an XLA dump, or *{PLAIN_SUFFIX} files)")
    return out


def _expand(spec: str) -> list[str]:
    if glob.has_magic(spec):
        matches = sorted(glob.glob(spec, recursive=True))
        if not matches:
            raise HloError(f"{spec}: no file matches")
        return matches
    if not os.path.exists(spec):
        raise HloError(f"{spec}: no such file or folder")
    return [spec]


def modules_in_folder(folder: str) -> list[str]:
    """An XLA dump folder's before_optimizations modules, or else the folder's *.hlo files."""
    names = sorted(os.listdir(folder))
    dump = [n for n in names if n.endswith(DUMP_SUFFIX)]
    chosen = dump or [n for n in names if n.endswith(PLAIN_SUFFIX)]
    return [os.path.join(folder, n) for n in chosen if os.path.isfile(os.path.join(folder, n))]


def module_name(path: str) -> str:
    """`module_0001.jit_f` for a dump's `module_0001.jit_f.before_optimizations.txt`, the
    name without its last suffix otherwise."""
    base = os.path.basename(path)
    if base.endswith(DUMP_SUFFIX):
        return base[:-len(DUMP_SUFFIX)]
    return os.path.splitext(base)[0] or base


def output_names(paths: list[str]) -> list[str]:
    """One unique output name per input: its module name, followed by a short hash of its
    absolute path when two inputs have the same module name (so names stay stable from
    run to run, whatever else is in the batch)."""
    names = [module_name(p) for p in paths]
    shared = {n for n in names if names.count(n) > 1}
    return [f"{n}-{hashlib.sha1(os.path.abspath(p).encode()).hexdigest()[:8]}"
            if n in shared else n for n, p in zip(names, paths)]
