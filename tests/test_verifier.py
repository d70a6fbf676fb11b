"""The verifier: well-formed modules pass; each kind of inconsistency is reported with the
instruction's name and position."""
from __future__ import annotations

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
    ("p = f32[4] parameter(0)\nq = f32[4] parameter(2)\nROOT r = f32[4] add(p, q)", "",
     r"q: parameter\(2\) in computation e, which has 2 parameters: the numbers must be 0..1"),
    ("p = f32[4] parameter(0)\nROOT r = f32[4] frobnicate(p)", "", "frobnicate"),
])
def test_inconsistencies_are_reported(body, computations, message):
    import re
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
