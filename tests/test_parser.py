"""The HLO grammar: every syntactic form XLA's parser accepts, read into the right IR."""
from __future__ import annotations

import math

import numpy as np
import pytest

import hlo_opt
from hlo_opt.ir import ELIDED
from hlo_opt.attributes import ConvDimLabels, Raw, Window
from hlo_opt.shape import UNBOUNDED, Layout, Shape, TupleShape


def entry(text: str):
    return hlo_opt.parse(text).entry


def inst(text: str, name: str):
    m = hlo_opt.parse(text)
    return next(i for i in m.instructions() if i.name == name)


def test_header_is_optional_and_last_computation_is_entry():
    m = hlo_opt.parse("""
    add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
    test { p = f32[4] parameter(0)  ROOT n = f32[4] negate(p) }""")
    assert m.entry.name == "test"
    assert m.name == "module_test"
    assert [c.name for c in m.computations] == ["add", "test"]


def test_entry_marker_wins_over_position():
    m = hlo_opt.parse("""HloModule m
    ENTRY main { p = f32[] parameter(0) ROOT n = f32[] negate(p) }
    other { q = f32[] parameter(0) ROOT c = f32[] copy(q) }""")
    assert m.entry.name == "main"


def test_names_with_dots_dashes_and_optional_percent():
    c = entry("""HloModule m
    ENTRY %e.1-x { %p.0-a = f32[2] parameter(0)  ROOT add.1-a = f32[2] add(%p.0-a, p.0-a) }""")
    assert c.root.name == "add.1-a"
    assert [o.name for o in c.root.operands] == ["p.0-a", "p.0-a"]
    assert c.root.operands[0] is c.root.operands[1]


def test_root_defaults_to_last_instruction():
    c = entry("HloModule m\nENTRY e { p = f32[] parameter(0)\n n = f32[] negate(p)\n a = f32[] abs(p) }")
    assert c.root.name == "a"


def test_signature_is_checked_and_accepted():
    c = entry("""HloModule m
    ENTRY %e (a: f32[2], b: s32[]) -> (f32[2], s32[]) {
      a = f32[2]{0} parameter(0)  b = s32[] parameter(1)  ROOT t = (f32[2]{0}, s32[]) tuple(a, b) }""")
    assert c.root.shape == TupleShape((Shape("f32", (2,), Layout((0,))), Shape("s32", (), None)))


@pytest.mark.parametrize("text, expected", [
    ("f32[]", Shape("f32", ())),
    ("pred[3]", Shape("pred", (3,))),
    ("bf16[2,3]{0,1}", Shape("bf16", (2, 3), Layout((0, 1)))),
    ("f32[8,128]{1,0:T(8,128)(2,1)}", Shape("f32", (8, 128), Layout((1, 0), "T(8,128)(2,1)"))),
    ("f32[2,3]{1,0:S(1)}", Shape("f32", (2, 3), Layout((1, 0), "S(1)"))),
    ("u32[]{:T(128)}", Shape("u32", (), Layout((), "T(128)"))),
    ("f32[<=4,?]", Shape("f32", (4, UNBOUNDED), None, (True, True))),
    ("f8e4m3fn[4]", Shape("f8e4m3fn", (4,))),
    ("s4[4]{0:E(4)}", Shape("s4", (4,), Layout((0,), "E(4)"))),
    ("token[]", Shape("token", ())),
    ("c128[1]", Shape("c128", (1,))),
])
def test_array_shapes(text, expected):
    i = inst(f"HloModule m\nENTRY e {{ ROOT p = {text} parameter(0) }}", "p")
    assert i.shape == expected
    assert i.shape.to_text() == text


def test_tuple_shapes_nest_and_allow_index_comments():
    i = inst("""HloModule m
    ENTRY e { ROOT p = (f32[], (s32[2], pred[]), /*index=2*/(), token[]) parameter(0) }""", "p")
    assert i.shape == TupleShape((Shape("f32", ()), TupleShape((Shape("s32", (2,)),
                                  Shape("pred", ()))), TupleShape(()), Shape("token", ())))


def test_tiled_layout_accessors():
    layout = Layout((1, 0), "T(8,128)(2,1)S(3)")
    assert layout.tiles == ((8, 128), (2, 1))
    assert layout.memory_space == 3


def test_nested_anonymous_instructions_get_named_and_ordered():
    m = hlo_opt.parse("""HloModule test
    ENTRY test {
        ROOT root = add(f32[10] parameter(0), multiply(f32[10] parameter(1), f32[10] parameter(2)))
    }""")
    names = [i.name for i in m.entry.instructions]
    assert names == ["parameter.anon", "parameter.anon.1", "parameter.anon.2", "multiply.anon", "root"]
    assert m.entry.root.shape.dims == (10,)
    assert [p.parameter_number for p in m.entry.parameters] == [0, 1, 2]


def test_tuple_shape_inside_anonymous_instruction():
    m = hlo_opt.parse("""HloModule test
    ENTRY test {
      ROOT root = get-tuple-element(
        (f32[10], f16[10]) tuple(f32[10] parameter(0), f16[10] parameter(1))
      ), index=0
    }""")
    assert m.entry.root.shape == Shape("f32", (10,), Layout((0,)))
    assert m.entry.root.attrs["index"] == 0


def test_omitted_result_shapes_are_inferred():
    c = entry("""HloModule m
    ENTRY e { a = f32[2,3] parameter(0)  b = f32[3,4] parameter(1)
      d = dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
      ROOT t = tuple(d, a) }""")
    d = c.instructions[2]
    assert d.shape.dims == (2, 4) and d.shape.element_type == "f32"
    assert [s.dims for s in c.root.shape.elements] == [(2, 4), (2, 3)]


def test_trailing_comma_in_operands_is_accepted():
    assert entry("HloModule m\nENTRY e { p = f32[] parameter(0)\n ROOT a = f32[] add(p, p,) }").root.opcode == "add"


def test_typed_operands_are_checked_against_definitions():
    c = entry("HloModule m\nENTRY e { p = f32[2,4]{1,0} parameter(0)\n ROOT a = f32[2,4] add(f32[2,4]{1,0} %p, %p) }")
    assert c.root.operands[0].name == "p"


@pytest.mark.parametrize("shape, literal, expected", [
    ("f32[]", "42", np.float32(42)),
    ("f32[]", "-1.5e-3", np.float32(-1.5e-3)),
    ("f32[]", "5.", np.float32(5)),
    ("f64[]", "-inf", -np.inf),
    ("pred[]", "true", True),
    ("s32[2,3]", "{{1,2,3},{4,5,6}}", np.arange(1, 7, dtype=np.int32).reshape(2, 3)),
    ("s32[3]", "{1 2 3}", np.array([1, 2, 3], np.int32)),
    ("u64[]", "18446744073709551615", np.uint64(2**64 - 1)),
    ("s4[3]", "{-8, 7, 0}", np.array([-8, 7, 0])),
    ("pred[2]", "{1, 0}", np.array([True, False])),
    ("c64[2]", "{(1, 2), (3.5, -1)}", np.array([1 + 2j, 3.5 - 1j], np.complex64)),
    ("c64[]", "(1, inf)", np.complex64(complex(1, np.inf))),       # not (nan, inf)
    ("f32[0]", "{}", np.zeros((0,), np.float32)),
    ("f32[2,0]", "{{},{}}", np.zeros((2, 0), np.float32)),
    ("f16[]", "65519", np.float16(65504)),
])
def test_literals(shape, literal, expected):
    i = inst(f"HloModule m\nENTRY e {{ ROOT c = {shape} constant({literal}) }}", "c")
    assert i.literal.shape == np.shape(expected)
    np.testing.assert_array_equal(i.literal.astype(np.result_type(expected)) if i.literal.dtype.kind != "V" else i.literal, expected)


def test_nan_literals_keep_sign_and_payload():
    i = inst("HloModule m\nENTRY e { ROOT c = f32[3] constant({nan, -nan, nan(0x7f)}) }", "c")
    bits = i.literal.view(np.uint32)
    assert all(np.isnan(i.literal))
    assert bits[1] >> 31 == 1
    assert bits[2] & 0x7FFFFF == 0x7F
    assert "nan(0x7f)" in hlo_opt.parse(hlo_opt.parse(
        "HloModule m\nENTRY e { ROOT c = f32[3] constant({nan, -nan, nan(0x7f)}) }").to_text()).to_text()


def test_tuple_and_elided_literals():
    t = inst("HloModule m\nENTRY e { ROOT c = (f32[], s32[2]) constant((1, {2, 3})) }", "c")
    assert float(t.literal[0]) == 1.0 and t.literal[1].tolist() == [2, 3]
    e = inst("HloModule m\nENTRY e { ROOT c = f32[67,89] constant({...}) }", "c")
    assert e.literal is ELIDED


def test_large_constant_is_parsed_in_bulk():
    n = 200_000
    body = "{" + ", ".join(str(i % 97) for i in range(n)) + "}"
    i = inst(f"HloModule m\nENTRY e {{ ROOT c = f32[{n}] constant({body}) }}", "c")
    assert i.literal.shape == (n,) and i.literal[96] == 96


def test_attribute_kinds_are_typed():
    m = hlo_opt.parse("""HloModule m
    add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
    ENTRY e {
      p = f32[1,8,8,3] parameter(0)  k = f32[3,3,3,4] parameter(1)  z = f32[] constant(0)
      conv = f32[1,4,4,4] convolution(p, k), window={size=3x3 stride=2x2 pad=1_1x1_1 rhs_dilate=1x1}, dim_labels=b01f_01io->b01f, feature_group_count=1
      s = f32[1,4,4,2] slice(conv), slice={[0:1], [0:4:1], [0:4], [0:4:2]}
      pd = f32[1,6,7,2] pad(s, z), padding=0_0x1_1x0_1_1x0_0
      r = f32[1,6] reduce(pd, z), dimensions={2,3}, to_apply=%add
      c = pred[1,6] compare(r, r), direction=LT, type=TOTALORDER
      ROOT o = f32[1,6] custom-call(r), custom_call_target="x", backend_config={"a": {"b": [1, 2]}}, metadata={op_name="jit(f)/x" source_line=3}, operand_precision={highest,default}, sharding={maximal device=0}
    }""")
    get = {i.name: i for i in m.instructions()}
    w = get["conv"].attrs["window"]
    assert isinstance(w, Window) and w.size == (3, 3) and w.stride == (2, 2) and w.pad == ((1, 1), (1, 1))
    assert get["conv"].attrs["dim_labels"] == ConvDimLabels("b01f", "01io", "b01f")
    assert get["conv"].attrs["dim_labels"].lhs_spatial == (1, 2)
    assert get["s"].attrs["slice"] == ((0, 1, 1), (0, 4, 1), (0, 4, 1), (0, 4, 2))
    assert get["pd"].attrs["padding"] == ((0, 0, 0), (1, 1, 0), (0, 1, 1), (0, 0, 0))
    assert get["r"].attrs["to_apply"] is m.computation("add")
    assert get["r"].attrs["dimensions"] == (2, 3)
    assert get["c"].attrs["direction"] == "LT" and get["c"].attrs["type"] == "TOTALORDER"
    o = get["o"].attrs
    assert o["custom_call_target"] == "x"
    assert o["backend_config"] == Raw('{"a": {"b": [1, 2]}}')
    assert o["operand_precision"] == ("highest", "default")
    assert o["sharding"] == Raw("{maximal device=0}")
    text = m.to_text(metadata=False)
    assert "metadata" not in text and "sharding={maximal device=0}" in text


def test_iota_replica_groups_sharding_and_control_predecessors():
    m = hlo_opt.parse("""HloModule m, replica_count=4
    add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
    ENTRY e { p = f32[8] parameter(0), sharding={devices=[2,2]<=[4] last_tile_dim_replicate}
      ar = f32[8] all-reduce(p), replica_groups=[2,2]<=[4], to_apply=add, channel_id=1
      ROOT c = f32[8] copy(ar), control-predecessors={%p}
    }""")
    ar = m.entry.instructions[1]
    assert ar.attrs["replica_groups"] == Raw("[2,2]<=[4]")
    assert m.entry.root.attrs["control-predecessors"] == ("p",)


def test_inline_called_computation():
    m = hlo_opt.parse("""HloModule m
    ENTRY e { p = f32[4] parameter(0)  z = f32[] constant(0)
      ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply={ a = f32[] parameter(0)
        b = f32[] parameter(1)
        ROOT s = f32[] add(a, b) }
    }""")
    body = m.entry.root.attrs["to_apply"]
    assert body.root.opcode == "add"
    assert m.computations.index(body) < m.computations.index(m.entry)


def test_async_wrapped_ops_and_execution_thread():
    m = hlo_opt.parse("""HloModule m
    mul { a = f32[5] parameter(0) ROOT m = f32[5] multiply(a, a) }
    ENTRY main { parameter = f32[5] parameter(0)
      start = ((f32[5]), f32[5]) call-start(parameter), to_apply=mul
      ROOT done = f32[5] call-done(start) }, execution_thread="main"
    """)
    assert m.entry.root.opcode == "call-done"
    assert m.entry.execution_thread == "main"


def test_stack_frame_tables_are_kept():
    text = """HloModule m
FileNames
1 "a.py"
FunctionNames
1 "f"
FileLocations
1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=1 end_column=2}
StackFrames
1 {file_location_id=1 parent_frame_id=0}

ENTRY e { ROOT p = f32[] parameter(0), metadata={stack_frame_id=1} }
"""
    m = hlo_opt.parse(text)
    assert m.extra_sections.splitlines()[0] == "FileNames"
    assert "StackFrames\n1 {file_location_id=1 parent_frame_id=0}" in m.to_text()


def test_comments_are_ignored():
    c = entry("""// leading
    HloModule m /* block
    comment */ ENTRY e { p = f32[] parameter(0) // trailing
      ROOT n = f32[] negate(p) }""")
    assert c.root.opcode == "negate"


def test_deep_chain_of_instructions():
    n = 20_000
    lines = ["HloModule m", "ENTRY e {", "  i0 = f32[4] parameter(0)"]
    lines += [f"  i{k} = f32[4] negate(i{k - 1})" for k in range(1, n)]
    lines.append("}")
    m = hlo_opt.parse("\n".join(lines))
    assert m.entry.root.name == f"i{n - 1}"
    assert len(m.entry.post_order()) == n
    assert hlo_opt.parse(m.to_text()).entry.root.name == f"i{n - 1}"


def test_deeply_nested_anonymous_operands():
    depth = 3000
    expr = "f32[] parameter(0)"
    for _ in range(depth):
        expr = f"f32[] negate({expr})"
    m = hlo_opt.parse(f"HloModule m\nENTRY e {{ ROOT r = f32[] abs({expr}) }}")
    assert len(m.entry.instructions) == depth + 2


# Forms XLA's parser accepts that are easy to get wrong; each parses here, and XLA agrees.
XLA_FORMS = {
    "comments inside shapes, layouts and literals": """/* leading */ HloModule m
    ENTRY e {
      p = f32/*t*/[/*rows*/2, 3]{1, /*minor*/0} parameter(0), metadata={op_name="a/*b*/c//d"}
      c = s32[2,1] constant({ /*i0=0*/ {1}, /*i0=1*/ {2} })
      ROOT t = (f32[2,3], s32[2,1]) tuple(p, c) // trailing
    }""",
    "names that end in a colon": """HloModule no_root:
    ENTRY e: {
      x:= f32[] constant(2)
      y: = f32[] constant(1)
    }""",
    "whitespace between type, dims and layout": """HloModule m
    ENTRY e {
      ROOT p = f32 [2,
        3]
        {1,-0} parameter(0)
    }""",
    "literal forms": """HloModule m
    ENTRY e {
      a = u64[2] constant({-1, 5})
      b = f32[2,2] constant(3)
      c = bf16[3] constant({nan(0x7f), -nan(0x1), nan(0x40)})
      d = f16[] constant(nan(0x1ff))
      e = f8e5m2[] constant(-nan(0x1))
      f = f32[] constant(-.5)
      ROOT t = (u64[2], f32[2,2], bf16[3], f16[], f8e5m2[], f32[]) tuple(a, b, c, d, e, f)
    }""",
    "signature parameters are not compared": """HloModule m
    ENTRY e (unused: s32[7], more: pred[]) -> f32[2] {
      ROOT p = f32[2] parameter(0)
    }""",
    "declared operand shapes up to dynamism": """HloModule m
    ENTRY e {
      p = s32[4] parameter(0)
      n = s32[] constant(2)
      d = s32[<=4] set-dimension-size(p, n), dimensions={0}
      ROOT c = s32[<=4] copy(s32[4] d)
    }""",
    "a single instruction": "f32[2] add(f32[2], f32[2] x)",
    "a named single instruction": "ROOT r = f32[2] add(f32[2] p, f32[2] p)",
    "inline branch computations": """HloModule m
    ENTRY e {
      i = s32[] parameter(0)
      x = f32[2] parameter(1)
      ROOT c = f32[2] conditional(i, x, x), branch_computations={
        { a = f32[2] parameter(0)  ROOT n = f32[2] negate(a) },
        { b = f32[2] parameter(0)  ROOT m = f32[2] abs(b) } }
    }""",
    "layout parts": """HloModule m
    ENTRY e {
      ROOT p = f32[8,128]{1,0 : D(D,C+~)T(8, 128)(2,*)L(2)#(u32)*(u16)E(32)S(1)SC(1:200)(0:1,2)M(4)} parameter(0)
    }""",
    "enum values in either case where XLA ignores case": """HloModule m
    ENTRY e {
      p = f32[2,2] parameter(0)
      ROOT d = f32[2,2] dot(p, p), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={HIGHEST,default}, algorithm=DOT_F32_F32_F32
    }""",
    "module attribute values": """HloModule m, is_scheduled=false, replica_count=1, input_output_alias={ {0}: (0, {}, may-alias), }, buffer_donor={ (1, {}) }, allow_spmd_sharding_propagation_to_output={true}
    ENTRY e {
      p = f32[2] parameter(0)
      q = f32[2] parameter(1)
      ROOT t = (f32[2]) tuple(p)
    }""",
    "result accuracy and operand layouts": """HloModule m
    ENTRY e {
      p = f32[2,3] parameter(0)
      x = f32[2,3] exponential(p), result_accuracy={tolerance={atol=0,rtol=0.5,ulps=1}}
      ROOT c = f32[3,2] custom-call(x), custom_call_target="t", operand_layout_constraints={f32[2,3]{0,1}}
    }""",
    "a generic async chain": """HloModule m
    c { a = f32[2] parameter(0)  ROOT n = f32[2] negate(a) }
    ENTRY e {
      p = f32[2] parameter(0)
      s = ((f32[2]), f32[2], s32[]) async-start(p), calls=c
      u = ((f32[2]), f32[2], s32[]) async-update(s), calls=c
      ROOT d = f32[2] async-done(u)
    }""",
    "an async wrapper takes the wrapped op's attributes": """HloModule m
    ENTRY e {
      p = f32[2] parameter(0)
      s = ((f32[2]), f32[2], s32[]) custom-call-start(p), custom_call_target="foo", async_execution_thread="t"
      ROOT d = f32[2] custom-call-done(s), async_execution_thread="t"
    }""",
}


@pytest.mark.parametrize("text", XLA_FORMS.values(), ids=XLA_FORMS.keys())
def test_forms_xla_accepts_parse_and_print_back(text):
    module = hlo_opt.parse(text)
    assert hlo_opt.parse(module.to_text()).to_text() == module.to_text()


@pytest.mark.parametrize("text", XLA_FORMS.values(), ids=XLA_FORMS.keys())
def test_xla_accepts_the_same_forms(text, xla):
    xla.parse(text)


def test_comments_read_as_whitespace_inside_tokens():
    i = inst(XLA_FORMS["comments inside shapes, layouts and literals"], "p")
    assert i.shape == Shape("f32", (2, 3), Layout((1, 0)))
    assert i.attrs["metadata"] == Raw('{op_name="a/*b*/c//d"}')
    c = inst(XLA_FORMS["comments inside shapes, layouts and literals"], "c")
    assert c.literal.tolist() == [[1], [2]]


def test_names_ending_in_colon_are_the_names_without_it():
    m = hlo_opt.parse(XLA_FORMS["names that end in a colon"])
    assert (m.name, m.entry.name, m.entry.root.name) == ("no_root", "e", "y")


def test_literals_as_xla_reads_them():
    get = {i.name: i.literal for i in hlo_opt.parse(XLA_FORMS["literal forms"]).instructions()}
    assert get["a"].tolist() == [2**64 - 1, 5]                 # u64 wraps a negative value
    assert get["b"].tolist() == [[3, 0], [0, 0]]               # a bare value fills element 0
    bits = get["c"].view(np.uint16).tolist()
    assert bits == [0x7F80 | 0x7F, 0xFF80 | 0x1, 0x7F80 | 0x40]
    assert int(get["d"].view(np.uint16)) == 0x7C00 | 0x1FF
    assert int(get["e"].view(np.uint8)) == 0xFC | 0x1
    assert float(get["f"]) == -0.5


def test_nan_payloads_print_back_for_every_width():
    text = hlo_opt.parse(XLA_FORMS["literal forms"]).to_text()
    assert "constant({nan(0x7f), -nan(0x1), nan})" in text     # 0x40 is bf16's quiet NaN
    assert "constant(nan(0x1ff))" in text and "constant(-nan(0x1))" in text


def test_single_instruction_text_makes_a_module_of_one_instruction():
    m = hlo_opt.parse(XLA_FORMS["a single instruction"])
    assert m.name == "_" and m.entry.name == "_"
    assert [(p.name, p.parameter_number) for p in m.entry.parameters] == [("_0", 0), ("x", 1)]
    assert m.entry.root.opcode == "add" and m.entry.root.name == "_"
    named = hlo_opt.parse(XLA_FORMS["a named single instruction"]).entry
    assert named.root.name == "r" and [p.name for p in named.parameters] == ["p"]
    assert named.root.operands[0] is named.root.operands[1]


def test_inline_branch_computations_become_computations():
    m = hlo_opt.parse(XLA_FORMS["inline branch computations"])
    branches = m.entry.root.attrs["branch_computations"]
    assert [b.root.opcode for b in branches] == ["negate", "abs"]


def test_every_opcode_takes_the_generic_attributes_and_its_own():
    from hlo_opt.ops import GENERIC_ATTRIBUTES, OPS, attribute_rules
    for opcode in OPS:
        allowed, required = attribute_rules(opcode)
        assert GENERIC_ATTRIBUTES <= allowed and required <= allowed
    assert attribute_rules("reduce")[1] == {"to_apply", "dimensions"}
    assert "to_apply" in attribute_rules("call-start")[0]
    assert attribute_rules("call-done")[0] == GENERIC_ATTRIBUTES | {"async_execution_thread"}
    assert attribute_rules("no-such-op") is None


def test_opcode_properties_name_real_opcodes_of_the_right_kind():
    """The op sets of hlo/ops.py that other stages read: a misspelt opcode would silently
    never match, so each names opcodes of the table, reducers being binary elementwise ops."""
    from hlo_opt import ops
    sets = (ops.COMMUTATIVE, ops.ASSOCIATIVE, ops.HEROES, ops.NOT_KERNELS, ops.HOST_OPS,
            ops.EXPENSIVE_ELEMENTWISE)
    for names in sets:
        assert names <= ops.OPS.keys()
    assert {ops.OPS[op].category for op in ops.COMMUTATIVE | ops.ASSOCIATIVE} == {"binary"}
    assert all(ops.is_elementwise(op) for op in ops.EXPENSIVE_ELEMENTWISE)
    assert not ops.HEROES & ops.NOT_KERNELS


@pytest.mark.parametrize("instruction, shape", [
    ("x = f32[] after-all()", "token[]"),
    ("x = f32[7] add-dependency(p, t)", "f32[2]"),
    ("x = f32[2] send(p, t), channel_id=1", "(f32[2], u32[], token[])"),
    ("x = (f32[2]) outfeed(p, t)", "token[]"),
    ("x = (f32[2], token[]) recv(t), channel_id=1", "(f32[2], u32[], token[])"),
    ("x = (f32[2], u32[], u32[]) infeed(t)", "(f32[2], token[])"),
    ("x = f32[] recv-done(r), channel_id=1", "(f32[3], token[])"),
    ("x = f32[] send-done(s), channel_id=1", "token[]"),
    ("x = f32[9] infeed(t)", "f32[9]"),      # no data shape to keep: the verifier says why
])
def test_transfer_shapes_are_rebuilt_as_xla_parses_them(instruction, shape):
    """XLA's parser gives these ops the shape their operands (or the declared data shape)
    make, whatever else the text declares; so do we."""
    module = hlo_opt.parse("HloModule m\nENTRY e {\n p = f32[2] parameter(0)\n"
                           " t = token[] after-all()\n"
                           " r = (f32[3], u32[], token[]) recv(t), channel_id=2\n"
                           " s = (f32[2], u32[], token[]) send(p, t), channel_id=3\n"
                           f" {instruction}\n ROOT c = s32[] constant(0)\n}}\n")
    [x] = [i for i in module.entry.instructions if i.name == "x"]
    assert x.shape.to_text(False) == shape
