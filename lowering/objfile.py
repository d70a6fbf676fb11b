"""The symbols of an object file, read from its ELF symbol table: which names it defines
and which it needs from elsewhere (jit.py checks the latter before loading it)."""
from __future__ import annotations

import struct
from dataclasses import dataclass

_SHT_SYMTAB = 2
_STB_GLOBAL, _STB_WEAK = 1, 2
_SHN_UNDEF = 0


@dataclass(frozen=True)
class Symbols:
    defined: frozenset[str]      # global and weak definitions
    undefined: frozenset[str]    # references the linker must resolve


def symbols(data: bytes) -> Symbols | None:
    """The global symbols of a 64-bit little-endian ELF relocatable object (what LLVM
    emits on x86-64 Linux); None for any other format."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shnum == 0 and shoff:                          # extended numbering: count in entry 0
        (shnum,) = struct.unpack_from("<Q", data, shoff + 0x20)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize)
                for k in range(shnum)]
    defined, undefined = set(), set()
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != _SHT_SYMTAB:
            continue
        strings = sections[link][4]
        for at in range(offset + entsize, offset + size, entsize):   # entry 0 is null
            name_at, info, _, shndx = struct.unpack_from("<IBBH", data, at)
            if info >> 4 not in (_STB_GLOBAL, _STB_WEAK):
                continue
            end = data.index(b"\0", strings + name_at)
            name = data[strings + name_at:end].decode()
            (undefined if shndx == _SHN_UNDEF else defined).add(name)
    return Symbols(frozenset(defined), frozenset(undefined))
