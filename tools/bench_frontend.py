"""Front-end benchmark: our parse and print times against XLA's C++ parser, same run.

    python -m hlo_opt.tools.bench_frontend [FILE.hlo ...]     (default: the 6 largest in tests/corpus)

Prints best-of-N wall times in milliseconds and the ratio (parse + print) / XLA parse.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

from .. import parse
from .. import xla_oracle


def best_seconds(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def default_files(count: int = 6) -> list[pathlib.Path]:
    files = sorted(pathlib.Path("tests/corpus").rglob("*.hlo"), key=lambda p: p.stat().st_size)
    return files[-count:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=pathlib.Path)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args(argv)
    files = args.files or default_files()
    have_xla = xla_oracle.available()
    print(f"{'module':44} {'lines':>6} {'instrs':>6} {'parse':>8} {'print':>8} "
          f"{'xla parse':>9} {'ratio':>6}")
    for path in files:
        text = path.read_text()
        module = parse(text, str(path))
        t_parse = best_seconds(lambda: parse(text), args.repeat)
        t_print = best_seconds(module.to_text, args.repeat)
        t_xla = xla_oracle.parse_seconds(text, args.repeat) if have_xla else float("nan")
        n = sum(1 for _ in module.instructions())
        print(f"{path.name:44} {text.count(chr(10)):6d} {n:6d} {t_parse * 1e3:8.2f} "
              f"{t_print * 1e3:8.2f} {t_xla * 1e3:9.2f} {(t_parse + t_print) / t_xla:6.2f}")
    if not have_xla:
        print(f"(no XLA column: {xla_oracle.reason})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
