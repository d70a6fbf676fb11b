"""tools/cc_tests.py and tools/simplifier_parity.py: XLA's simplifier tests split into
modules with what each expects, and each test's parity status from what our optimizer does."""
from __future__ import annotations

from collections import Counter

import pytest

from hlo_opt import parse
from hlo_opt.tools import simplifier_parity as parity
from hlo_opt.tools.cc_tests import split_tests

MUL_ONE = """
HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  one = f32[] constant(1)
  b = f32[4] broadcast(one), dimensions={}
  ROOT r = f32[4] multiply(p, b)
}"""

TRANSPOSE = """
HloModule m
ENTRY e {
  p = f32[1,4] parameter(0)
  ROOT t = f32[4,1] transpose(p), dimensions={1,0}
}"""

TEST_CC = rf'''
namespace xla {{
// A brace in a comment: {{
TEST_F(AlgebraicSimplifierTest, MulOne) {{
  const char* kModuleStr = R"({MUL_ONE})";
  TF_ASSERT_OK_AND_ASSIGN(auto m, ParseAndReturnVerifiedModule(kModuleStr));
  // EXPECT_FALSE(simplifier.Run(m.get()).value()); is only a comment
  ASSERT_TRUE(AlgebraicSimplifier(default_options_).Run(m.get()).value());
  EXPECT_THAT(m->entry_computation()->root_instruction(), GmockMatch(m::Parameter(0)));
}}

TEST_F(AlgebraicSimplifierTest, KeepsTranspose) {{
  const char* hlo = R"hlo({TRANSPOSE})hlo";
  TF_ASSERT_OK_AND_ASSIGN(auto m, ParseAndReturnVerifiedModule(hlo));
  EXPECT_FALSE(simplifier.Run(m.get()).value());
}}

TEST_F(AlgebraicSimplifierTest, TransposeIsReshape) {{
  const char* hlo = R"({TRANSPOSE})";
  TF_ASSERT_OK_AND_ASSIGN(auto m, ParseAndReturnVerifiedModule(hlo));
  AlgebraicSimplifier simplifier(default_options_);
  TF_ASSERT_OK_AND_ASSIGN(bool changed, RunHloPass(&simplifier, m.get()));
  EXPECT_TRUE(changed);
  EXPECT_THAT(m->entry_computation()->root_instruction(),
              GmockMatch(m::Reshape(m::Parameter(0))));
  EXPECT_TRUE(verifier().Run(m.get()).status().ok());
}}

TEST_F(AlgebraicSimplifierTest, BuiltWithBuilder) {{
  auto builder = HloComputation::Builder(TestName());
  builder.AddInstruction(HloInstruction::CreateParameter(0, r0f32_, "p"));
  EXPECT_THAT(simplifier.Run(m.get()), IsOkAndHolds(true));
}}

TEST_F(AlgebraicSimplifierTest, Templated) {{
  const char* hlo = R"(ENTRY e {{ ROOT p = $0 parameter(0) }})";
  auto g = simplifier.Run(m.get()).value();
  ASSERT_FALSE(g);
}}

TEST_P(DotTest, Parametric) {{
  const char* hlo = R"({MUL_ONE})";
  bool changed = RunHloPass(AlgebraicSimplifier(options), m.get()).value();
  EXPECT_EQ(changed, GetParam().rewrites);
}}

TEST_F(AlgebraicSimplifierTest, Unchecked) {{
  const char* hlo = R"({MUL_ONE})";
  simplifier.Run(m.get()).value();
}}
}}  // namespace xla
'''


@pytest.fixture(scope="module")
def tests():
    return split_tests(TEST_CC, "simplifier")


def by_name(tests):
    return {t.name: t for t in tests}


def test_every_test_is_found_with_its_modules(tests):
    assert [(t.fixture, t.name, len(t.modules)) for t in tests] == [
        ("AlgebraicSimplifierTest", "MulOne", 1),
        ("AlgebraicSimplifierTest", "KeepsTranspose", 1),
        ("AlgebraicSimplifierTest", "TransposeIsReshape", 1),
        ("AlgebraicSimplifierTest", "BuiltWithBuilder", 0),
        ("AlgebraicSimplifierTest", "Templated", 0),
        ("DotTest", "Parametric", 1),
        ("AlgebraicSimplifierTest", "Unchecked", 1)]
    t = by_name(tests)
    assert t["MulOne"].modules[0].text == MUL_ONE
    assert TEST_CC.splitlines()[t["MulOne"].line - 1].startswith("TEST_F(Algebraic")
    assert "R\"(" in TEST_CC.splitlines()[t["MulOne"].modules[0].line - 1]


def test_what_each_test_expects_of_the_run(tests):
    expects = {t.name: [m.expects for m in t.modules] or t.expects for t in tests}
    assert expects == {"MulOne": ["rewrite"], "KeepsTranspose": ["no change"],
                       "TransposeIsReshape": ["rewrite"], "BuiltWithBuilder": "rewrite",
                       "Templated": "no change", "Parametric": ["parametric"],
                       "Unchecked": ["unchecked"]}


def test_the_opcodes_the_matchers_name(tests):
    t = by_name(tests)
    assert t["MulOne"].modules[0].expected_opcodes == {"parameter"}
    assert t["TransposeIsReshape"].modules[0].expected_opcodes == {"reshape", "parameter"}


def test_a_module_is_paired_with_the_run_that_follows_it():
    two = ('TEST_F(AlgebraicSimplifierTest, Two) {\n'
           f'  const char* a = R"({MUL_ONE})";\n'
           '  ASSERT_FALSE(simplifier.Run(m.get()).value());\n'
           f'  const char* b = R"({TRANSPOSE})";\n'
           '  ASSERT_TRUE(simplifier.Run(m.get()).value());\n'
           '  EXPECT_THAT(root, GmockMatch(m::Exp(m::Op())));\n}\n')
    [test] = split_tests(two, "simplifier")
    assert [(m.expects, m.expected_opcodes) for m in test.modules] == [
        ("no change", frozenset()), ("rewrite", {"exponential"})]


def test_rewritten_means_fewer_instructions_or_a_new_graph_with_the_expected_opcodes():
    def sig(text):
        return parity.signature(parse(text))

    transpose = sig(TRANSPOSE)
    reshape = sig(TRANSPOSE.replace("transpose(p), dimensions={1,0}", "reshape(p)"))
    copy = sig(TRANSPOSE.replace("transpose(p), dimensions={1,0}", "copy(p)"))
    assert parity.rewritten(sig(MUL_ONE), sig(TRANSPOSE), frozenset())
    assert parity.rewritten(transpose, reshape, {"reshape", "parameter"})
    assert not parity.rewritten(transpose, reshape, frozenset())
    assert not parity.rewritten(transpose, transpose, {"transpose"})
    assert not parity.rewritten(transpose, copy, {"reshape"})


def test_the_signature_sees_reordering_not_names_or_commuted_operands():
    reduce_negate = """
HloModule m
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  p = f32[4] parameter(0)
  z = f32[] constant(0)
  n = f32[4] negate(p)
  ROOT r = f32[] reduce(n, z), dimensions={0}, to_apply=add
}"""
    negate_reduce = reduce_negate.replace(
        "  n = f32[4] negate(p)\n  ROOT r = f32[] reduce(n, z), dimensions={0}, to_apply=add",
        "  r = f32[] reduce(p, z), dimensions={0}, to_apply=add\n  ROOT n = f32[] negate(r)")
    assert "ROOT n = f32[] negate(r)" in negate_reduce
    renamed = reduce_negate.replace("n = f32[4]", "neg = f32[4]").replace("(n, z)", "(neg, z)")
    commuted = reduce_negate.replace("add(a, b)", "add(b, a)")
    laid_out = reduce_negate.replace("f32[4] parameter(0)", "f32[4]{0} parameter(0)")
    sig = parity.signature(parse(reduce_negate))
    assert parity.signature(parse(renamed)) == sig
    assert parity.signature(parse(commuted)) == sig
    assert parity.signature(parse(laid_out)) == sig
    assert parity.signature(parse(negate_reduce)) != sig
    # Swapped operands of an op that does not commute are another graph.
    swapped = reduce_negate.replace("add(a, b)", "subtract(b, a)")
    assert parity.signature(parse(swapped)) != \
        parity.signature(parse(reduce_negate.replace("add(a, b)", "subtract(a, b)")))


def _result(done_from: str | None = None, xla_error=None, parse_error=None,
            fired: dict[str, str] | None = None) -> parity.ModuleResult:
    """A module's results: rewritten from mode `done_from` on; rule -> mode it fires from."""
    modes = parity.MODES
    first = modes.index(done_from) if done_from else len(modes)
    by_mode = {m: parity.Optimized(2, i >= first, Counter(
                   {rule: 1 for rule, f in (fired or {}).items() if i >= modes.index(f)}))
               for i, m in enumerate(modes)}
    return parity.ModuleResult(3, parse_error, None, xla_error,
                               {} if parse_error else by_mode)


def test_status_of_each_kind_of_test(tests):
    t = by_name(tests)

    def status(name, *results, unsound=(), tagged=()):
        return parity.status(t[name], name, list(results), set(unsound), set(tagged))

    assert status("MulOne", _result("strict")) == ("done", "", "strict")
    assert status("MulOne", _result("fast")) == ("done", "", "fast")
    assert status("MulOne", _result()) == ("missing", "", "")
    assert status("MulOne", _result(parse_error="1:2: bad")) == ("missing", "1:2: bad", "")
    assert status("MulOne", _result(), unsound=["MulOne"])[0] == "not sound"
    assert status("MulOne", _result("xla"), unsound=["MulOne"])[0] == "done"
    assert status("BuiltWithBuilder", unsound=["BuiltWithBuilder"])[0] == "not sound"
    assert status("MulOne", _result(xla_error="no")) == (
        "not applicable", "XLA:CPU does not run it: no", "")
    assert status("KeepsTranspose", _result()) == ("not applicable", "expects no change", "")
    assert status("BuiltWithBuilder") == ("not applicable", "no HLO text", "")
    assert status("Parametric", _result())[0] == "not applicable"
    # A rule tagged for the test matched, but extraction kept the input.
    kept = ("rule fires, not chosen", "the cost model keeps the input", "xla")
    assert status("MulOne", _result(fired={"mul_one": "xla"}), tagged=["mul_one"]) == kept
    assert status("MulOne", _result(fired={"other": "strict"}), tagged=["mul_one"])[0] == \
        "missing"
    assert status("MulOne", _result("fast", fired={"mul_one": "strict"}),
                  tagged=["mul_one"]) == ("done", "", "fast")


def test_unsound_headings_name_tests():
    text = "# Unsound\n\n## MaxOfClamp\nwhy\n### Detail\n## FoldPadIntoReduceWindow, Other\n"
    assert parity.unsound_tests(text) == {"MaxOfClamp", "FoldPadIntoReduceWindow", "Other"}


# The families of issue 16, with the XLA tests it names in each.
ISSUE_FAMILIES = {
    "reassociation & constants": """MultiplyChain MultiplyReassociateMergeConstants
        MultiplyReassociateMergeBroadcastedConstants AddReassociateMergeBroadcastedConstants
        SubAddReassociateMergeConstants FactorIntegerAddition FactorFpAddition
        FactorFpAdditionWithBroadcast FactorFpAdditionBfloat16""",
    "strength reduction": """UnsignedDivideByPowerOf2 SignedDivideByPowerOf2
        UnsignedRemainderByPowerOf2 SignedRemainderByPowerOf2 DivideByBroadcastedConstant
        RecipSqrt RecipRsqrt RsqrtDivide RsqrtOfRPower2 PowHalf MultiplySelfSqrt
        MultiplySelfRsqrt SqrtOfSelfMultiply SquareOfAbs AbsEliminationMultiply
        ScalarMultiplyReduction MultiplyOfConvertedPred ScalarDividePredicate""",
    "compare/select": """SelectGtCompare SelectLtCompare SelectEqCompare SelectNeCompare
        CompareGtMaxA CompareGtMaxB CompareGtAMin CompareGtBMin CompareIota
        CompareAbsLtZeroBecomesFalse CompareLtZero CompareLeZero CompareGeZero CompareGtZero
        CompareZeroGt CompareZeroGe CompareZeroLe CompareZeroLt CompareSame CompareSimplified
        CompareSimplifiedReversed CompareSelectCompare MinOfMaxToClamp MaxOfMinToClamp
        ClampOfClamp MaxOfClamp AbsEliminationSelMaxBcast ClampOfPartitionId""",
    "slicing & joining": """SliceOfPadLow SliceOfPadHigh SliceOfPadMidNonScalar
        SliceOfPadMidScalar SliceOfBroadcast DynamicSliceOfBroadcast SliceOfConcatScalarInput
        SliceOfConcatNonScalarInput SliceOfMultipleConcatOperands SliceReverse
        SliceOfReduceWindowOneReduceDim SliceOfReduceWindowTwoReduceDims ConcatToBroadcast
        UnnestConcatenate DynamicUpdateSliceTrivialIndices AddDynamicUpdateSliceToAddSlice
        AddDynamicUpdateSliceToAddSliceOnLhs SelectDUSWithShapedPred ShrinkNestedReverse
        SwapConstantEwboWithReverse""",
    "layout & data movement": """TransposeIsReshape TransposeReshapeToConcatSlice
        TransposeOfDot TransposeOfBroadcast BroadcastToTranspose
        DegenerateDimsInOperandRemovedFromBroadcast BroadcastAndPadReorder
        ElementwiseSinkMultipleBroadcastsConstantMix DotContractingReorder_RL
        DotContractingReorder_LR BitcastUndoesBitcast SimplifyRedundantBitcastConvert""",
    "reductions": """ReduceOfNegate ReduceOfMergeNoncontractingDims
        ReduceOfSplitNoncontractingDims SimplifyReduceOfConcatWithDifferentShapes
        TrivialReduceWindow_Add TrivialReduceWindow_Min TrivialReduceWindow_Max
        UnaryVariadicReduce UnaryVariadicReduceWindow ZeroSizedVariadicReduceWindow
        FoldPadIntoReduceWindow RemainderOfIota RemainderOfNPlusIota RepeatedRemainder""",
}


def test_families_are_the_issues():
    wrong = {name: parity.family(name) for fam, names in ISSUE_FAMILIES.items()
             for name in names.split() if parity.family(name) != fam}
    assert wrong == {}
    assert parity.family("IsNonNegative_Broadcast") == "other"
    assert set(parity.FAMILY_ORDER) >= {f for _, f in parity.FAMILIES}


def test_rule_comments_name_the_tests_they_cover(tmp_path):
    rules = tmp_path / "r.rules"
    rules.write_text("ruleset simplify\n"
                     "rule mul_one [strict]: multiply(x, 1) => x        # xla: MulOne\n"
                     "rule neg_neg [strict]: negate(negate(x)) => x\n"
                     "    when is_float(x)                              # xla: NegNeg, Other\n")
    tags = parity.rule_tags([str(rules)])
    assert {k: [(i.name, i.where, i.mode) for i in v] for k, v in tags.items()} == {
        "MulOne": [("mul_one", "r.rules:2", "strict")],
        "NegNeg": [("neg_neg", "r.rules:3", "strict")],
        "Other": [("neg_neg", "r.rules:3", "strict")]}


def test_the_table_without_xla(tmp_path, capsys):
    cc = tmp_path / "algebraic_simplifier_test.cc"
    cc.write_text(TEST_CC)
    unsound = tmp_path / "unsound.md"
    unsound.write_text("## Unchecked\n")
    tagged = tmp_path / "tagged.rules"
    tagged.write_text("rule neg_neg_tagged [strict]: negate(negate(x)) => x"
                      "  # xla: TransposeIsReshape, Parametric\n")
    out = tmp_path / "parity.md"
    assert parity.main([str(cc), "--no-xla", "--unsound", str(unsound), "--out", str(out),
                        "--rules", "default", "--rules", str(tagged)]) == 0
    text = out.read_text()
    assert "python -m hlo_opt.tools.simplifier_parity PATH/algebraic_simplifier_test.cc" in text
    assert "| expecting a rewrite and running on XLA:CPU | 2 |" in text
    rows = {line.split(" | ")[0][2:]: line for line in text.splitlines()
            if line.startswith("| ") and line.count(" | ") == 5}
    assert rows["MulOne"].endswith("| strict | 4 → 1 | done |")
    assert "`mul_one` (arithmetic.rules:" in rows["MulOne"]
    assert rows["KeepsTranspose"].endswith("not applicable: expects no change |")
    assert rows["DotTest.Parametric"].endswith("not applicable: expects parametric |")
    assert rows["Unchecked"].endswith("| not sound |")
    tag = "`neg_neg_tagged` (tagged.rules:1, strict)"
    assert tag in rows["TransposeIsReshape"] and tag in rows["DotTest.Parametric"]
    assert tag not in rows["MulOne"]
    assert capsys.readouterr().err.strip().startswith("done ")


def test_an_unreadable_test_file_is_one_line_with_exit_code_2(tmp_path, capsys):
    missing = tmp_path / "missing_test.cc"
    assert parity.main([str(missing), "--no-xla"]) == 2
    assert capsys.readouterr().err.strip() == f"{missing}: cannot read: No such file or directory"


def test_xla_runs_or_says_why_not(xla):
    assert parity.execute_error(MUL_ONE) is None
    bad = MUL_ONE.replace("f32[4] multiply", "f32[5] multiply")
    assert parity.execute_error(bad)


def test_without_xla_the_tool_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    from hlo_opt import xla_oracle
    monkeypatch.setattr(xla_oracle, "available", lambda: False)
    monkeypatch.setattr(xla_oracle, "reason", "XLA oracle unavailable")
    cc = tmp_path / "algebraic_simplifier_test.cc"
    cc.write_text(TEST_CC)
    assert parity.main([str(cc)]) == 2
    assert capsys.readouterr().err.strip() == \
        "simplifier_parity: XLA oracle unavailable (or run with --no-xla)"
