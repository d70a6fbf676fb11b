"""tools/xla_parse_rate.py: HLO modules are found in C++ test files and each lands in the
column that says who accepts it."""
from __future__ import annotations

from hlo_opt.tools import xla_parse_rate as rate

TEST_CC = r'''
TEST_F(Foo, Bar) {
  const char* hlo = R"(
HloModule m
ENTRY e {
  ROOT p = f32[2] parameter(0)
})";
  const char* bad = R"hlo(
ENTRY e {
  ROOT p = f32[2] parametr(0)
})hlo";
  const char* pattern = R"(CHECK: %p = f32[2] parameter(0))";
  const char* templ = R"(ENTRY e { ROOT p = $0 parameter(0) })";
  const char* proto = R"pb(name: "x")pb";
}
'''


def test_raw_strings_that_read_like_modules_are_found(tmp_path):
    cc = tmp_path / "foo_test.cc"
    cc.write_text(TEST_CC)
    found = rate.hlo_strings(cc)
    assert len(found) == 2
    assert "HloModule m" in found[0] and "parametr(0)" in found[1]


def test_files_are_grouped_by_label_each_once(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a_test.cc").write_text(TEST_CC)
    (tmp_path / "b_test.cc").write_text(TEST_CC)
    groups = rate.collect([f"one={tmp_path / 'sub' / 'a_test.cc'}", f"all={tmp_path}"])
    assert [len(groups["one"]), len(groups["all"])] == [2, 2]


def test_columns_say_who_accepts():
    V = rate.Verdict
    assert rate.column(V(None, None, None)) == "both accept"
    assert rate.column(V(None, "parse error", None)) == "XLA only"
    assert rate.column(V(None, None, "verifier error")) == "verifier only"
    assert rate.column(V("xla error", None, None)) == "we only"
    assert rate.column(V("xla error", None, "verifier error")) == "both reject"


def test_counts_on_a_test_file(tmp_path, xla, capsys):
    cc = tmp_path / "foo_test.cc"
    cc.write_text(TEST_CC)
    assert rate.main([f"demo={cc}"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row == ["demo", "2", "1", "0", "0", "0", "1"]


def test_an_unreadable_file_is_one_line_with_exit_code_2(tmp_path, capsys):
    missing = tmp_path / "missing_test.cc"
    assert rate.main([str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"{missing}: cannot read: No such file or directory"
