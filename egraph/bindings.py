"""egglog's Rust bindings, loaded without egglog's Python front end.

`import egglog.bindings` first runs egglog/__init__.py, which imports the high-level API,
black and graphviz: 0.25-0.4 s at every start of hlo-opt, for classes we never use (the text
API is all we need). The extension module alone loads in ~0.08 s. It is registered as
`egglog.bindings`, so a later `from egglog.bindings import X` anywhere gets this same module;
if the package layout is not what we expect, the ordinary import is used.

    from .bindings import egg      # egg.EGraph, egg.Push, egg.EggSmolError, ...
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_NAME = "egglog.bindings"


def _load():
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    spec = importlib.util.find_spec("egglog")
    folder = os.path.dirname(spec.origin) if spec is not None and spec.origin else ""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    files = [f for f in os.listdir(folder) if f.startswith("bindings.") and f.endswith(suffixes)] \
        if folder else []
    if len(files) != 1:
        import egglog.bindings
        return egglog.bindings
    path = os.path.join(folder, files[0])
    loader = importlib.machinery.ExtensionFileLoader(_NAME, path)
    module = importlib.util.module_from_spec(
        importlib.util.spec_from_file_location(_NAME, path, loader=loader))
    loader.exec_module(module)
    sys.modules[_NAME] = module
    return module


egg = _load()
