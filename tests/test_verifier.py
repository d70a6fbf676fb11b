"""The verifier: well-formed modules pass; each kind of inconsistency is reported with the
instruction's name and position."""
from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import corpus_files, corpus_ids
from hlo_opt import HloError, parse
from hlo_opt.ir import Computation, Instruction, Module
from hlo_opt.shape import array
from hlo_opt.verifier import verify

ADD = "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b) }\n"


@pytest.mark.parametrize("path", corpus_files(), ids=corpus_ids(corpus_files()))
def test_corpus_modules_verify(path):
    verify(parse(path.read_text()))


def _error(body: str, computations: str = "") -> HloError:
    module = parse(f"HloModule m\n{computations}ENTRY e {{\n{body}\n}}\n")
    with pytest.raises(HloError) as info:
        verify(module)
    return info.value


def test_reports_name_message_and_position():
    e = _error("p = f32[4] parameter(0)\nq = f32[5] parameter(1)\nROOT add.3 = f32[4] add(p, q)")
    assert e.message == "add.3: operand shapes f32[4] and f32[5] differ"
    assert (e.line, e.column) == (5, 6)          # at the name, after ROOT


@pytest.mark.parametrize("body, computations, message", [
    ("p = f32[4] parameter(0)\nROOT r = f32[5] abs(p)", "",
     r"r: result shape should be f32\[4\], declared f32\[5\]"),
    ("p = f32[4] parameter(0)\nROOT r = f32[4] compare(p, p), direction=LT", "",
     r"should be pred\[4\]"),
    ("p = f32[4] parameter(0)\nROOT r = f32[4] add(p)", "", "add takes 2 operands, got 1"),
    ("p = f32[4] parameter(0)\nz = f32[] constant(0)\n"
     "ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=bad",
     "bad { a = f32[] parameter(0)\n b = f32[] parameter(1)\n c = f32[] parameter(2)\n"
     " ROOT r = f32[] add(a, b) }\n", r"reduce computation bad takes \(f32\[\], f32\[\], f32\[\]\)"),
    ("p = f32[4] parameter(0)\nz = s32[] constant(0)\n"
     "ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add", ADD, "differ in type"),
    ("p = f32[4] parameter(0)\nROOT w = f32[4] while(p), condition=c, body=b",
     "c { x = f32[4] parameter(0)\n ROOT t = pred[] constant(true) }\n"
     "b { x = f32[4] parameter(0)\n ROOT y = f32[2] slice(x), slice={[0:2]} }\n",
     r"while body computation b returns f32\[2\], expected f32\[4\]"),
    ("i = s32[] parameter(0)\np = f32[4] parameter(1)\n"
     "ROOT r = f32[4] conditional(i, p), branch_computations={b0, b0}",
     "b0 { x = f32[4] parameter(0)\n ROOT y = f32[4] negate(x) }\n",
     "2 branches but 1 branch operands"),
    ("p = f32[4] parameter(0)\nROOT s = f32[4] sort(p), dimensions={0}, to_apply=add", ADD,
     r"sort comparator computation add returns f32\[\], expected pred\[\]"),
    ("p = f32[2,3] parameter(0)\nROOT b = f32[3,4] broadcast(p), dimensions={0,1}", "",
     "inconsistently"),
    ("p = f32[2,3] parameter(0)\nROOT c = s32[3,2] convert(p)", "", "convert changes dimensions"),
    ("p = f32[2,3] parameter(0)\nROOT r = f32[7] reshape(p)", "", "element count"),
    ("p = f32[2] parameter(0)\nROOT r = u8[2,2] bitcast-convert(p)", "", "number of bits"),
    ("p = f32[2] parameter(0)\nROOT r = f32[2,2] iota(), iota_dimension=2", "",
     "iota_dimension=2"),
    ("a = f32[2,3] parameter(0)\nb = f32[3,4] parameter(1)\n"
     "ROOT d = f32[2,5] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "",
     r"dot result should be f32\[2,4\]"),
    ("p = f32[2,3] parameter(0)\nROOT t = f32[2,3] transpose(p), dimensions={1,0}", "",
     r"should be f32\[3,2\]"),
    ("p = f32[4] parameter(0)\nROOT r = f32[4] frobnicate(p)", "", "frobnicate"),
])
def test_inconsistencies_are_reported(body, computations, message):
    try:
        e = _error(body, computations)
    except HloError as parse_error:         # the parser may reject it first (unknown opcode)
        e = parse_error
    assert re.search(message, e.message), e.message


def test_preferred_result_types_of_contractions_are_allowed():
    verify(parse("HloModule m\nENTRY e {\na = s8[2,3] parameter(0)\nb = s8[3,4] parameter(1)\n"
                 "ROOT d = s32[2,4] dot(a, b), lhs_contracting_dims={1}, "
                 "rhs_contracting_dims={0}\n}"))


def _module(instructions, root, extra=()):
    comp = Computation("e", instructions, root)
    return Module("m", [*extra, comp], comp)


def test_structural_problems_in_built_ir():
    s = array("f32", (2,))
    p = Instruction("p", "parameter", s, parameter_number=0)
    stray = Instruction("x", "parameter", s, parameter_number=0)
    bad = Instruction("a", "add", s, [p, stray])
    with pytest.raises(HloError, match="a: operand x is not in computation e"):
        verify(_module([p, bad], bad))
    with pytest.raises(HloError, match="name is used twice"):
        twin = Instruction("p", "negate", s, [p])
        verify(_module([p, twin], twin))
    with pytest.raises(HloError, match="root r is not one of its instructions"):
        verify(_module([p], Instruction("r", "negate", s, [p])))


def test_literal_dims_are_checked():
    c = Instruction("c", "constant", array("f32", (3,)), literal=np.zeros(2, np.float32))
    with pytest.raises(HloError, match=r"c: literal has dims \[2\]"):
        verify(_module([c], c))


def test_recursive_calls_are_rejected():
    s = array("f32", ())
    p = Instruction("p", "parameter", s, parameter_number=0)
    call = Instruction("c", "call", s, [p])
    loop = Computation("loop", [p, call], call)
    call.attrs["to_apply"] = loop
    q = Instruction("q", "parameter", s, parameter_number=0)
    top = Instruction("t", "call", s, [q], {"to_apply": loop})
    with pytest.raises(HloError, match="calls itself"):
        verify(_module([q, top], top, extra=[loop]))


def test_callee_must_belong_to_the_module():
    s = array("f32", ())
    p = Instruction("p", "parameter", s, parameter_number=0)
    outside = Computation("outside", [p], p)
    q = Instruction("q", "parameter", s, parameter_number=0)
    call = Instruction("c", "call", s, [q], {"to_apply": outside})
    with pytest.raises(HloError, match="calls computation outside, which is not in the module"):
        verify(_module([q, call], call))


# ------------------------------------------ ops whose result XLA fixes by other means

NEG = "neg { x = f32[4] parameter(0)\n ROOT n = f32[4] negate(x) }\n"

WELL_FORMED = {
    "all-gather": "a = f32[2,4] parameter(0)\n"
                  "ROOT g = f32[8,4] all-gather(a), dimensions={0}, replica_groups={{0,1,2,3}}",
    "all-gather iota groups": "a = f32[2,4] parameter(0)\nROOT g = f32[2,8] all-gather(a), "
                              "dimensions={1}, replica_groups=[2,2]<=[2,2]T(1,0)",
    "all-gather of two": "a = f32[2] parameter(0)\nb = s32[3] parameter(1)\nROOT g = "
                         "(f32[4], s32[6]) all-gather(a, b), dimensions={0}, "
                         "replica_groups={{0,1},{2,3}}",
    "all-gather without groups": "a = f32[1,4] parameter(0)\n"
                                 "ROOT g = f32[3,4] all-gather(a), dimensions={0}",
    "all-gather-start": "a = f32[2] parameter(0)\ns = (f32[2], f32[4]) all-gather-start(a), "
                        "dimensions={0}, replica_groups={{0,1}}\n"
                        "ROOT d = f32[4] all-gather-done(s)",
    "all-reduce": "a = f32[4] parameter(0)\n"
                  "ROOT r = f32[4] all-reduce(a), to_apply=add, replica_groups={{0},{1,2}}",
    "all-reduce-start": "a = f32[4] parameter(0)\ns = f32[4] all-reduce-start(a), "
                        "to_apply=add\nROOT d = f32[4] all-reduce-done(s)",
    "reduce-scatter": "a = f32[8,4] parameter(0)\nROOT r = f32[2,4] reduce-scatter(a), "
                      "dimensions={0}, to_apply=add, replica_groups={{0,1,2,3}}",
    "all-to-all": "a = f32[8,4] parameter(0)\n"
                  "ROOT r = f32[8,4] all-to-all(a), dimensions={0}, replica_groups={{0,1,2,3}}",
    "all-to-all of two": "a = f32[4] parameter(0)\nb = f32[4] parameter(1)\n"
                         "ROOT r = (f32[4], f32[4]) all-to-all(a, b), replica_groups={{0,1}}",
    "collective-permute": "a = f32[4] parameter(0)\nROOT r = f32[4] collective-permute(a), "
                          "source_target_pairs={{0,1},{1,0}}",
    "collective-permute-start": "a = f32[4] parameter(0)\ns = (f32[4], f32[4], u32[], u32[]) "
                                "collective-permute-start(a), source_target_pairs={{0,1}}\n"
                                "ROOT d = f32[4] collective-permute-done(s)",
    "collective-broadcast": "a = f32[4] parameter(0)\n"
                            "ROOT r = f32[4] collective-broadcast(a), replica_groups={{0,1}}",
    "copy-start": "a = f32[4] parameter(0)\ns = (f32[4], f32[4], u32[]) copy-start(a)\n"
                  "ROOT d = f32[4] copy-done(s)",
    "send and recv": "a = f32[4] parameter(0)\nt = token[] after-all()\n"
                     "s = (f32[4], u32[], token[]) send(a, t), channel_id=1\n"
                     "sd = token[] send-done(s), channel_id=1\n"
                     "r = (f32[4], u32[], token[]) recv(t), channel_id=2\n"
                     "rd = (f32[4], token[]) recv-done(r), channel_id=2\n"
                     "ROOT x = f32[4] get-tuple-element(rd), index=0",
    "infeed and outfeed": "t = token[] after-all()\ni = (f32[4], token[]) infeed(t)\n"
                          "d = f32[4] get-tuple-element(i), index=0\n"
                          "ROOT o = token[] outfeed(d, t)",
    "rng": "a = f32[] parameter(0)\nb = f32[] parameter(1)\n"
           "ROOT r = f32[3,4] rng(a, b), distribution=rng_normal",
    "rng-bit-generator": "s = u64[2] parameter(0)\n"
                         "ROOT r = (u64[2], u32[4,4]) rng-bit-generator(s), algorithm=rng_default",
    "rng-bit-generator, bits only": "s = u64[2] parameter(0)\n"
                                    "ROOT r = u32[4,4] rng-bit-generator(s), algorithm=rng_default",
    "global device ids": "a = f32[4] parameter(0)\nROOT r = f32[4] all-reduce(a), "
                         "to_apply=add, channel_id=1, use_global_device_ids=true",
    "groups over lines": "a = f32[4] parameter(0)\nROOT r = f32[4] all-reduce(a), "
                         "to_apply=add, replica_groups={\n  {0,1},\n  {2,3}\n}",
    "wrapped custom-call": "a = f32[2,3] parameter(0)\ns = ((f32[2,3]), f32[2,3], u32[]) "
                           "custom-call-start(a), custom_call_target=\"foo\"\n"
                           "ROOT d = f32[2,3] custom-call-done(s)",
    "rng-get-and-update-state": "ROOT r = u64[2] rng-get-and-update-state(), delta=1",
    "stochastic-convert": "a = f32[4] parameter(0)\nb = u32[4] parameter(1)\n"
                          "ROOT r = s32[4] stochastic-convert(a, b)",
    "dynamic-reshape": "a = f32[4,2] parameter(0)\nn = s32[] parameter(1)\n"
                       "ROOT r = f32[2,4] dynamic-reshape(a, n, n)",
    "async-start": "a = f32[4] parameter(0)\n"
                   "s = ((f32[4]), f32[4], s32[]) async-start(a), calls=neg\n"
                   "u = ((f32[4]), f32[4], s32[]) async-update(s)\n"
                   "ROOT d = f32[4] async-done(u)",
    "wrapped async op": "a = f32[4] parameter(0)\n"
                        "s = ((f32[4]), f32[4], s32[]) negate-start(a)\n"
                        "ROOT d = f32[4] negate-done(s)",
    "custom-call": "a = f32[4] parameter(0)\n"
                   "ROOT c = (f32[2], s32[]) custom-call(a), custom_call_target=\"foo\"",
}


@pytest.mark.parametrize("body", WELL_FORMED.values(), ids=WELL_FORMED)
def test_collectives_transfers_and_async_ops_verify(body):
    verify(parse(f"HloModule m\n{ADD}{NEG}ENTRY e {{\n{body}\n}}\n"))


@pytest.mark.parametrize("body, message", [
    ("a = f32[2,4] parameter(0)\nROOT g = f32[6,4] all-gather(a), dimensions={0}, "
     "replica_groups={{0,1,2,3}}",
     "g: all-gather over groups of 4 needs a factor of 4 between dimension sizes 2 and 6, "
     "not 3"),
    ("a = f32[4] parameter(0)\nROOT g = f32[99999999999,4] all-gather(a), dimensions={0}",
     r"g: all-gather result should be f32\[100000000000\], declared f32\[99999999999,4\]"),
    ("a = f32[4] parameter(0)\nROOT g = f32[8] all-gather(a), dimensions={1}",
     "g: dimensions entry 1 is out of range for rank 1"),
    ("a = f32[2] parameter(0)\nROOT g = f32[4] all-gather(a), dimensions={0}, "
     "replica_groups={{0,1},{1,2}}", "must name each participant 0..3 exactly once"),
    ("a = f32[2] parameter(0)\nROOT g = f32[4] all-gather(a), dimensions={0}, "
     "replica_groups={{0},{1,2}}", "replica_groups must all have the same size"),
    ("a = f32[2] parameter(0)\nROOT g = f32[4] all-gather(a), dimensions={0}, "
     "replica_groups=[2,3]<=[4]", r"2x3 devices do not match \[4\]"),
    ("a = f32[7,4] parameter(0)\nROOT r = f32[2,4] reduce-scatter(a), dimensions={0}, "
     "to_apply=add", r"reduce-scatter cannot split dimension 0 of f32\[7,4\] into 4"),
    ("a = f32[6,4] parameter(0)\nROOT r = f32[6,4] all-to-all(a), dimensions={0}, "
     "replica_groups={{0,1,2,3}}", r"cannot split dimension 0 of f32\[6,4\] into 4 pieces"),
    ("a = f32[4] parameter(0)\nROOT r = (f32[4]) all-to-all(a), replica_groups={{0,1}}",
     "all-to-all over groups of 2 takes 2 operands, got 1"),
    ("a = f32[4] parameter(0)\nROOT r = f32[4] collective-permute(a), "
     "source_target_pairs={{0,1},{0,2}}", "a source appears twice"),
    ("a = f32[4] parameter(0)\nROOT r = f32[5] collective-permute(a), "
     "source_target_pairs={{0,1}}", r"result shape should be f32\[4\], declared f32\[5\]"),
    ("a = f32[4] parameter(0)\nROOT r = f32[4] all-reduce(a, a), to_apply=add",
     r"result shape should be \(f32\[4\], f32\[4\]\)"),
    ("a = f32[4] parameter(0)\nROOT s = (f32[4], f32[4]) copy-start(a)",
     r"result shape should be \(f32\[4\], f32\[4\], u32\[\]\)"),
    ("a = f32[4] parameter(0)\nROOT s = (f32[4], u32[], token[]) send(a, a)",
     r"send operand 1 must be a token, got f32\[4\]"),
    ("t = token[] after-all()\nROOT r = f32[4] recv(t)",
     r"recv produces \(data, u32\[\], token\[\]\)"),
    ("t = token[] after-all()\nROOT i = f32[4] infeed(t)",
     r"infeed produces \(data, token\[\]\), not f32\[4\]"),
    ("a = f32[4] parameter(0)\nROOT r = f32[4] all-reduce(a), to_apply=add, "
     "use_global_device_ids=true", "use_global_device_ids=true needs a channel_id"),
    ("a = f32[2] parameter(0)\nROOT g = f32[4] all-gather(a), dimensions={0}, "
     "replica_groups={{0,1}}, use_global_device_ids=true", "needs a channel_id"),
    ("a = f32[4] parameter(0)\nROOT i = (f32[4], token[]) infeed(a)",
     "infeed operand must be a token"),
    ("a = s32[] parameter(0)\nROOT r = s32[3] rng(a, a), distribution=rng_normal",
     "rng_normal cannot produce s32"),
    ("a = f32[] parameter(0)\nb = f64[] parameter(1)\n"
     "ROOT r = f32[3] rng(a, b), distribution=rng_uniform", "must share one element type"),
    ("s = u64[2] parameter(0)\nROOT r = (u64[3], u32[4]) rng-bit-generator(s), "
     "algorithm=rng_default", r"rng-bit-generator produces \(u64\[2\], random bits\)"),
    ("ROOT r = u64[3] rng-get-and-update-state(), delta=1", r"should be u64\[2\]"),
    ("a = f32[4] parameter(0)\nb = s32[4] parameter(1)\nROOT r = s32[4] "
     "stochastic-convert(a, b)", "unsigned random bits of its width and dims"),
    ("a = f32[4,2] parameter(0)\nn = s32[] parameter(1)\n"
     "ROOT r = f32[2,4] dynamic-reshape(a, n)", r"takes 2 sizes, got 1"),
    ("a = f32[4] parameter(0)\nROOT s = ((f32[4]), f32[5], s32[]) async-start(a), calls=neg",
     r"async-start result should start with \(f32\[4\]\), f32\[4\]"),
    ("a = f32[4] parameter(0)\nROOT s = ((f32[4]), f32[5], s32[]) negate-start(a)",
     r"result shape should be f32\[4\], declared f32\[5\]"),
    ("a = f32[4] parameter(0)\nROOT c = f32[9999999999999999999] custom-call(a), "
     "custom_call_target=\"foo\"", r"c: f32\[9999999999999999999\] has 34\.7 EiB, more than "
                                  r"an array can hold \(2\^63 - 1 bytes\)"),
])
def test_inconsistent_collectives_transfers_and_async_ops_are_reported(body, message):
    e = _error(body, ADD + NEG)
    assert re.search(message, e.message), e.message
    assert e.line > 0


@pytest.mark.parametrize("dims, message", [
    ("lhs_batch_dims={0}, lhs_contracting_dims={0}, rhs_batch_dims={0}, "
     "rhs_contracting_dims={1}", r"lhs_batch_dims \{0\} and lhs_contracting_dims \{0\} share "
                                 "a dimension"),
    ("lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     r"lhs_batch_dims \{0\} and rhs_batch_dims \{\} differ in length"),
    ("lhs_contracting_dims={1,1}, rhs_contracting_dims={0,1}",
     r"lhs_contracting_dims \[1, 1\] repeats a dimension"),
])
def test_dot_dimension_numbers_are_checked(dims, message):
    e = _error(f"a = f32[4,4] parameter(0)\nb = f32[4,4] parameter(1)\n"
               f"ROOT d = f32[4] dot(a, b), {dims}")
    assert re.search(message, e.message), e.message


def test_every_opcode_result_is_checked():
    """Each opcode's declared shape is compared with inference or checked on its own; only
    parameters (any shape), constants (their literal) and custom-calls (whatever the target
    makes) have no rule, and they too are bounded in size."""
    from hlo_opt.declared_shapes import DECLARED_CHECKS
    from hlo_opt.ops import OPS
    from hlo_opt.shape_inference import INFERABLE
    unchecked = {op for op in OPS if op not in DECLARED_CHECKS and op not in INFERABLE}
    assert unchecked == {"parameter", "constant", "custom-call"}


ADD_1 = ("add1 { a = f32[] parameter(0)\n b = f32[] parameter(1)\n s = f32[] add(a, b)\n"
         " ROOT t = (f32[]) tuple(s) }\n")
LT = "lt { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=LT }\n"
GE = "ge { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=GE }\n"

# name: (computations, entry body, whether XLA compiles it)
XLA_JUDGED = {
    "reduce of an init value alone": (ADD, "z = f32[] constant(0)\n"
                                      "ROOT r = f32[] reduce(z), dimensions={}, to_apply=add",
                                      False),
    "reduce of three operands": (ADD, "p = f32[4] parameter(0)\nz = f32[] constant(0)\n"
                                 "ROOT r = f32[] reduce(p, z, z), dimensions={0}, to_apply=add",
                                 False),
    "reduce-window of three operands": (ADD, "p = f32[4] parameter(0)\nz = f32[] constant(0)\n"
                                        "ROOT r = f32[3] reduce-window(p, z, z), "
                                        "window={size=2}, to_apply=add", False),
    "scatter of four operands": (ADD, "p = f32[4] parameter(0)\ni = s32[1,1] parameter(1)\n"
                                 "u = f32[1] parameter(2)\nROOT s = f32[4] scatter(p, i, u, u), "
                                 "update_window_dims={}, inserted_window_dims={0}, "
                                 "scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
                                 "to_apply=add", False),
    "select-and-scatter of two operands": (ADD + GE, "p = f32[4] parameter(0)\n"
                                           "z = f32[] constant(0)\nROOT s = f32[4] "
                                           "select-and-scatter(p, z), window={size=2 stride=2}, "
                                           "select=ge, scatter=add", False),
    "sort of nothing": (LT, "ROOT s = () sort(), dimensions={0}, to_apply=lt", False),
    "reduce with a 1-tuple reducer": (ADD_1, "p = f32[4,3] parameter(0)\nz = f32[] constant(0)"
                                      "\nROOT r = (f32[3]) reduce(p, z), dimensions={0}, "
                                      "to_apply=add1", True),
    "reduce-window with a 1-tuple reducer": (ADD_1, "p = f32[4,6] parameter(0)\n"
                                             "z = f32[] constant(0)\nROOT r = (f32[3,5]) "
                                             "reduce-window(p, z), window={size=2x2}, "
                                             "to_apply=add1", True),
    "pred dot": ("", "a = pred[9,30] parameter(0)\nb = pred[30,10] parameter(1)\n"
                 "ROOT d = pred[9,10] dot(a, b), lhs_contracting_dims={1}, "
                 "rhs_contracting_dims={0}", True),
    "a tuple declared with its operands nested": ("", "p = f32[2,3] parameter(0)\n"
                                                  "q = u32[] parameter(1)\nROOT t = "
                                                  "((f32[2,3]), f32[2,3], u32[]) tuple(p, p, q)",
                                                  False),
    "infeed of an array": ("", "t = token[] after-all()\nROOT i = f32[3] infeed(t)", False),
    "global device ids without a channel": (ADD, "p = f32[8] parameter(0)\nROOT r = f32[8] "
                                            "all-reduce(p), replica_groups={}, "
                                            "use_global_device_ids=true, to_apply=add", False),
    "maximum of f16 and f32": ("", "a = f16[4] parameter(0)\nb = f32[4] parameter(1)\n"
                               "ROOT r = f32[4] maximum(a, b)", False),
    "a copy that transposes": ("", "a = f32[2,3] parameter(0)\nROOT r = f32[3,2] copy(a)",
                               False),
    "reduce-window of f32 from a bf16 init": (ADD, "p = f32[4] parameter(0)\n"
                                              "z = bf16[] constant(0)\nROOT r = f32[3] "
                                              "reduce-window(p, z), window={size=2}, "
                                              "to_apply=add", False),
    "a broadcast repeating a dimension": ("", "a = f32[4,4] parameter(0)\nROOT b = f32[4,4,2] "
                                          "broadcast(a), dimensions={1,1}", False),
    "a broadcast that transposes": ("", "a = f32[4,4] parameter(0)\nROOT b = f32[4,4,2] "
                                    "broadcast(a), dimensions={1,0}", True),
    "a scatter into dimension 5 of a rank-2 input": (ADD, "x = f32[4,3] parameter(0)\ni = s32[2,1] parameter(1)\nu = f32[2,3] parameter(2)\n"
                 "ROOT s = f32[4,3] scatter(x, i, u), update_window_dims={1}, "
                 "inserted_window_dims={0}, scatter_dims_to_operand_dims={5}, "
                 "index_vector_dim=1, to_apply=add", False),
    "a scatter into dimension 0": (ADD, "x = f32[4,3] parameter(0)\ni = s32[2,1] parameter(1)\nu = f32[2,3] parameter(2)\n"
                 "ROOT s = f32[4,3] scatter(x, i, u), update_window_dims={1}, "
                 "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
                 "index_vector_dim=1, to_apply=add", True),
    "a convolution of a token": ("", "t = token[] after-all()\nb = f32[1,4,4] parameter(0)\n"
                                 "ROOT c = f32[1,4,4] convolution(t, b), window={size=1}, "
                                 "dim_labels=b0f_0io->b0f", False),
    "add-dependency on data": ("", "a = f32[4] parameter(0)\nb = f32[4] parameter(1)\n"
                               "ROOT d = f32[4] add-dependency(a, b)", False),
    "add-dependency on a token": ("", "a = f32[4] parameter(0)\nt = token[] after-all()\n"
                                  "ROOT d = f32[4] add-dependency(a, t)", True),
    "a float written as an integer past 64 bits": (
        "", "ROOT c = f32[] constant(18446744073709551616)", False),
    "a float written as the largest u64": (
        "", "ROOT c = f32[] constant(18446744073709551615)", True),
    "a bounded dynamic result of a static op": ("", "a = s32[4] parameter(0)\n"
                                                "b = s32[5] parameter(1)\nROOT c = s32[<=9] "
                                                "concatenate(a, b), dimensions={0}", True),
}


def _accepted(text: str) -> bool:
    try:
        verify(parse(text))
    except HloError:
        return False
    return True


# Refused by XLA too, but asking it in process kills the process (its parser aborts).
XLA_ABORTS_ON = {
    "a dot of one operand": ("", "a = f32[4,4] parameter(0)\nROOT d = f32[4,4] dot(a), "
                             "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
    "sort along no dimension": (LT, "a = f32[4,4] parameter(0)\nROOT s = f32[4,4] sort(a), "
                                "dimensions={}, to_apply=lt"),
    "sort along two dimensions": (LT, "a = f32[4,4] parameter(0)\nROOT s = f32[4,4] sort(a), "
                                  "dimensions={0,1}, to_apply=lt"),
}


@pytest.mark.parametrize("name", XLA_ABORTS_ON)
def test_what_xla_aborts_on_is_an_error(name):
    computations, body = XLA_ABORTS_ON[name]
    assert not _accepted(f"HloModule m\n{computations}ENTRY e {{\n{body}\n}}\n")


@pytest.mark.parametrize("name", XLA_JUDGED)
def test_we_accept_exactly_what_xla_compiles(name):
    """Parser plus verifier agree with XLA's compile (checked against it where jax is
    installed; the verdicts were taken from it)."""
    from hlo_opt import xla_oracle
    computations, body, compiles = XLA_JUDGED[name]
    text = f"HloModule m\n{computations}ENTRY e {{\n{body}\n}}\n"
    assert _accepted(text) == compiles
    if xla_oracle.available():
        try:
            xla_oracle.compile(text)
            xla_verdict = True
        except xla_oracle.XlaError:
            xla_verdict = False
        assert xla_verdict == compiles
