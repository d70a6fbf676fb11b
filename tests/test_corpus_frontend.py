"""Every corpus fixture (JAX output and XLA's optimized output): parses, round-trips to the
same IR, XLA's parser accepts our print, and the interpreter agrees with XLA."""
from __future__ import annotations

import pytest

import hlo_opt
from conftest import assert_same_ir, corpus_files, corpus_ids

FILES = corpus_files()


def test_corpus_is_present():
    assert len(FILES) >= 40, "tests/corpus fixtures are missing"


@pytest.mark.parametrize("path", FILES, ids=corpus_ids(FILES))
def test_parse_print_parse_is_identity(path):
    module = hlo_opt.parse(path.read_text(), str(path))
    printed = module.to_text()
    again = hlo_opt.parse(printed, "printed")
    assert_same_ir(module, again)
    assert again.to_text() == printed


@pytest.mark.parametrize("path", FILES, ids=corpus_ids(FILES))
def test_xla_parses_our_print(path, xla):
    printed = hlo_opt.parse(path.read_text(), str(path)).to_text()
    xla.parse(printed)
