"""Benchmark inputs shipped with the package: large/ holds the large variants of every corpus
workload (written by `python -m hlo_opt.tools.gen_corpus --large`), read by tools/bench_cpu.py."""
