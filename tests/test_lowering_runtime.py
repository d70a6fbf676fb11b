"""The CPU runtime: host control flow, buffer assignment, fallbacks, the kernel cache,
threads, arguments and the listing entry points (emit_llvm, emit_asm, hlo-run)."""
from __future__ import annotations

import re
import threading
import warnings

import numpy as np
import pytest

import hlo_opt
from hlo_opt import HloError, UnsupportedError
from hlo_opt.lowering import FallbackWarning, emit_asm, emit_llvm, jit, output_pool
from hlo_opt.targets import cpu_facts
from lowering_helpers import assert_matches, run_both

ADD = "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b) }"
MAX = "mx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] maximum(a, b) }"


def module(body: str, computations: str = "") -> str:
    return f"HloModule t\n{computations}\nENTRY e {{\n  " + "\n  ".join(
        l.strip() for l in body.strip().splitlines()) + "\n}\n"


def test_while_rotating_state_and_counter():
    """The body returns its state rotated: results that are other state elements must be
    read before any is overwritten."""
    comps = """cond {
  s = (s32[], f32[4], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[4], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  a = f32[4] get-tuple-element(s), index=1
  b = f32[4] get-tuple-element(s), index=2
  c = f32[4] get-tuple-element(s), index=3
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ab = f32[4] add(a, b)
  ROOT t = (s32[], f32[4], f32[4], f32[4]) tuple(j, c, ab, a)
}"""
    text = module("""
        x = f32[4] parameter(0)
        y = f32[4] parameter(1)
        z = f32[4] parameter(2)
        zero = s32[] constant(0)
        init = (s32[], f32[4], f32[4], f32[4]) tuple(zero, x, y, z)
        ROOT w = (s32[], f32[4], f32[4], f32[4]) while(init), condition=cond, body=body""", comps)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(4).astype(np.float32) for _ in range(3)]
    ours, want = run_both(text, args)
    for g, w in zip(ours, want):
        assert_matches(g, w, 0, "while")


def test_scan_with_dynamic_update_slice_in_a_loop():
    comps = """cond {
  s = (s32[], f32[6,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[6,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  a = f32[6,3] get-tuple-element(s), index=1
  z = s32[] constant(0)
  f = f32[] convert(i)
  r = f32[1,3] broadcast(f), dimensions={}
  u = f32[6,3] dynamic-update-slice(a, r, i, z)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[6,3]) tuple(j, u)
}"""
    text = module("""
        a = f32[6,3] parameter(0)
        zero = s32[] constant(0)
        init = (s32[], f32[6,3]) tuple(zero, a)
        w = (s32[], f32[6,3]) while(init), condition=cond, body=body
        ROOT r = f32[6,3] get-tuple-element(w), index=1""", comps)
    ours, want = run_both(text, [np.full((6, 3), -1, np.float32)])
    assert_matches(ours[0], want[0], 0, "scan")


SCAN = """cond {
  s = (s32[], f32[4,8], f32[10,4,8], f32[10,4,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[4,8], f32[10,4,8], f32[10,4,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  h = f32[4,8] get-tuple-element(s), index=1
  ys = f32[10,4,8] get-tuple-element(s), index=2
  xs = f32[10,4,8] get-tuple-element(s), index=3
  z = s32[] constant(0)
  x3 = f32[1,4,8] dynamic-slice(xs, i, z, z), dynamic_slice_sizes={1,4,8}
  x = f32[4,8] reshape(x3)
  hx = f32[4,8] add(h, x)
  h2 = f32[4,8] tanh(hx)
  y = f32[1,4,8] reshape(h2)
  ys2 = f32[10,4,8] dynamic-update-slice(ys, y, i, z, z)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[4,8], f32[10,4,8], f32[10,4,8]) tuple(j, h2, ys2, xs)
}"""


def test_a_scan_updates_its_stacked_outputs_in_place():
    """A scan (jax.lax.scan) writes one slice of its stacked outputs per iteration: the
    stacked buffer is made once (in the output array itself), the update kernel writes only
    the slice, and the loop copies neither it nor the scanned inputs (the caller's array)."""
    from hlo_opt.lowering.program import Copy, While
    from hlo_opt.lowering.runtime import build
    text = module("""
        h0 = f32[4,8] parameter(0)
        xs = f32[10,4,8] parameter(1)
        zero = s32[] constant(0)
        c = f32[] constant(0)
        ys = f32[10,4,8] broadcast(c), dimensions={}
        init = (s32[], f32[4,8], f32[10,4,8], f32[10,4,8]) tuple(zero, h0, ys, xs)
        w = (s32[], f32[4,8], f32[10,4,8], f32[10,4,8]) while(init), condition=cond, body=body
        h = f32[4,8] get-tuple-element(w), index=1
        out = f32[10,4,8] get-tuple-element(w), index=2
        ROOT r = (f32[4,8], f32[10,4,8]) tuple(h, out)""", SCAN)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((4, 8)).astype(np.float32),
            rng.standard_normal((10, 4, 8)).astype(np.float32)]
    saved = [a.copy() for a in args]
    ours, want = run_both(text, args)
    for g, w in zip(ours, want):
        assert_matches(g, w, 4, "scan", atol=1e-6)   # tanh to a few ulp, 10 times
    assert all(np.array_equal(a, s) for a, s in zip(args, saved))
    program = build(hlo_opt.parse(text))[0]
    [loop] = [s for s in program.steps if isinstance(s, While)]
    stacked, scanned = loop.state[2], loop.state[3]
    assert stacked.kind == "out" and loop.init[2] is stacked      # made in the output
    assert scanned.kind == "param"                                # read where it lies
    assert loop.body_results[2] is stacked and loop.body_results[3] is scanned
    assert not any(isinstance(s, Copy) for s in loop.body.steps)
    [update] = [s for s in loop.body.steps if stacked in s.outs]
    assert stacked in update.ins          # one fusion computes h and writes its slice:
    assert update.kernel.work == 2 * 4 * 8  # elements of both, not of the 10 x 4 x 8 stack


def _updated_as_interpreted(text: str, more: list):
    """The program of a module updating x = f32[64,32] at rows i = s32[5,1] with
    u = f32[5,32] (then `more` arguments), after checking that its results equal the
    interpreter's and that the caller's arrays stay as they were."""
    from hlo_opt.lowering.runtime import build
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((64, 32)).astype(np.float32),
            np.array([[3], [60], [3], [-2], [63]], np.int32),
            rng.standard_normal((5, 32)).astype(np.float32) + 2] + more
    saved = [np.copy(a) for a in args]
    ours, want = run_both(text, args)
    for g, w in zip(ours, want):
        assert_matches(g, w, 1, "update")
    assert all(np.array_equal(a, s) for a, s in zip(args, saved))
    return build(hlo_opt.parse(text))[0]


def test_a_scatter_into_a_dead_temporary_updates_it_in_place():
    """A scatter whose operand nobody reads afterwards writes only its updates, into the
    operand's buffer; one into the caller's array copies it first."""
    from hlo_opt.lowering.program import KernelStep
    text = module("""
        x = f32[64,32] parameter(0)
        i = s32[5,1] parameter(1)
        u = f32[5,32] parameter(2)
        e = f32[64,32] exponential(x)
        s1 = f32[64,32] scatter(e, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=mx
        s2 = f32[64,32] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=mx
        ROOT t = (f32[64,32], f32[64,32]) tuple(s1, s2)""", MAX)
    program = _updated_as_interpreted(text, [])
    s1, s2 = [s for s in program.steps if isinstance(s, KernelStep)
              and s.kernel.comp.root.opcode == "scatter"]
    assert s1.outs[0] in s1.ins and s1.kernel.work < 5 * 32 * 2     # the updates only
    assert s2.outs[0] not in s2.ins and s2.kernel.work > 64 * 32      # copies x first


def test_several_updates_of_one_array_copy_it_once():
    """Three updates of the caller's array (two scatters, a dynamic-update-slice whose
    update reads the array) each need a copy of it: one kernel reads it once and writes
    the three copies, then each update writes only its updates there."""
    from hlo_opt.lowering.program import KernelStep
    text = module("""
        x = f32[64,32] parameter(0)
        i = s32[5,1] parameter(1)
        u = f32[5,32] parameter(2)
        j = s32[] parameter(3)
        s1 = f32[64,32] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
        s2 = f32[64,32] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=mx
        z = s32[] constant(0)
        w = f32[4,8] dynamic-slice(x, j, z), dynamic_slice_sizes={4,8}
        n = f32[4,8] negate(w)
        d = f32[64,32] dynamic-update-slice(x, n, z, j)
        ROOT t = (f32[64,32], f32[64,32], f32[64,32]) tuple(s1, s2, d)""", ADD + "\n" + MAX)
    program = _updated_as_interpreted(text, [np.int32(7)])
    x = next(b for s in program.steps for b in s.ins if b.kind == "param" and b.index == 0)
    copy, *updates = [s for s in program.steps if isinstance(s, KernelStep)
                      and any(b is x for b in s.ins)]
    assert copy.ins == [x] and len(copy.outs) == 3 and copy.kernel.extent == 64 * 32
    assert [s.outs for s in updates] == [[o] for o in copy.outs]
    assert all(s.kernel.updates == (0,) and s.kernel.work < 64 * 32 for s in updates)


@pytest.mark.parametrize("body", [
    # A parameter is the caller's array: updated in a copy.
    "ROOT d = f32[6,5] dynamic-update-slice(p, u, i, z)",
    # The old value (a kernel's output, not fused into the update) is read after it.
    """d = f32[6,5] dynamic-update-slice(e, u, i, z)
       ROOT t = (f32[6,5], f32[6,5]) tuple(d, e)""",
    # Both updates of one value read it before either writes.
    """d1 = f32[6,5] dynamic-update-slice(e, u, i, z)
       d2 = f32[6,5] dynamic-update-slice(e, u, z, z)
       ROOT t = (f32[6,5], f32[6,5]) tuple(d1, d2)""",
    # The update reads the array it updates.
    """s = f32[2,5] slice(e), slice={[1:3], [0:5]}
       ROOT d = f32[6,5] dynamic-update-slice(e, s, i, z)""",
    # A conditional's branch updates its operand, which is read afterwards.
    """b = pred[] compare(i, i), direction=EQ
       c = f32[6,5] conditional(b, e, e), true_computation=upd, false_computation=upd
       ROOT t = (f32[6,5], f32[6,5]) tuple(c, e)""",
])
def test_an_update_in_place_never_overwrites_a_value_still_read(body):
    comps = """lt { a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT r = pred[] compare(a, b), direction=LT }
upd { q = f32[6,5] parameter(0)
 k = f32[1,5] constant({{1, 2, 3, 4, 5}})
 z = s32[] constant(0)
 ROOT d = f32[6,5] dynamic-update-slice(q, k, z, z) }"""
    body = """p = f32[6,5] parameter(0)
        u = f32[2,5] parameter(1)
        i = s32[] parameter(2)
        z = s32[] constant(0)
        e = f32[6,5] sort(p), dimensions={1}, to_apply=lt
        """ + body
    text = module(body, comps)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((6, 5)).astype(np.float32),
            rng.standard_normal((2, 5)).astype(np.float32), np.int32(3)]
    saved = [np.copy(a) for a in args]
    ours, want = run_both(text, args)
    for g, w in zip(ours, want):
        assert_matches(g, w, 2, "update")
    assert all(np.array_equal(a, s) for a, s in zip(args, saved))


@pytest.mark.parametrize("body", [
    # into the caller's array, which stays as it was; the update reads it
    """s = f32[8,16] dynamic-slice(p, i, j), dynamic_slice_sizes={8,16}
       two = f32[8,16] broadcast(c), dimensions={}
       u = f32[8,16] multiply(s, two)
       r = f32[1,8,16] reshape(u)
       x = f32[1,300,64] reshape(p)
       ROOT d = f32[1,300,64] dynamic-update-slice(x, r, z, i, j)""",
    # of a value the kernel computes (fused: computed while copied)
    """e = f32[300,64] exponential(p)
       u = f32[8,16] broadcast(c), dimensions={}
       ROOT d = f32[300,64] dynamic-update-slice(e, u, i, j)""",
])
@pytest.mark.parametrize("i,j", [(3, 10), (-5, 60), (296, -1), (150, 48)])
def test_an_update_into_a_buffer_of_its_own_copies_then_writes_the_window(body, i, j):
    """A dynamic-update-slice that cannot update its operand in place copies it (split
    across threads by rows) and then stores the window: work of the copy and the update,
    no choice between them per element; starts are clamped so the window fits."""
    from hlo_opt.lowering.program import KernelStep
    from hlo_opt.lowering.runtime import build
    text = module("""p = f32[300,64] parameter(0)
        i = s32[] parameter(1)
        j = s32[] parameter(2)
        z = s32[] constant(0)
        c = f32[] constant(2)
        """ + body)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((300, 64)).astype(np.float32), np.int32(i), np.int32(j)]
    saved = args[0].copy()
    [got], [want] = run_both(text, args)
    assert_matches(got, want, 1, "update")
    assert np.array_equal(args[0], saved)
    [step] = [s for s in build(hlo_opt.parse(text))[0].steps if isinstance(s, KernelStep)]
    assert step.kernel.work == 300 * 64 + 8 * 16 and step.kernel.extent == 300


@pytest.mark.parametrize("results,init", [
    ("j, u, a", "zero, e, e"),          # the old stacked value is also returned, rotated
    ("j, u, b", "zero, e, e"),          # one initial buffer for two state elements
    ("j, u, b", "zero, x, e"),          # the caller's array as initial state
])
def test_loop_state_updated_in_place_keeps_every_other_value(results, init):
    comps = f"""cond {{
  s = (s32[], f32[6,3], f32[6,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(i, n), direction=LT
}}
body {{
  s = (s32[], f32[6,3], f32[6,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  a = f32[6,3] get-tuple-element(s), index=1
  b = f32[6,3] get-tuple-element(s), index=2
  z = s32[] constant(0)
  f = f32[] convert(i)
  r = f32[1,3] broadcast(f), dimensions={{}}
  u = f32[6,3] dynamic-update-slice(a, r, i, z)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[6,3], f32[6,3]) tuple({results})
}}"""
    text = module(f"""
        x = f32[6,3] parameter(0)
        zero = s32[] constant(0)
        e = f32[6,3] exponential(x)
        init = (s32[], f32[6,3], f32[6,3]) tuple({init})
        w = (s32[], f32[6,3], f32[6,3]) while(init), condition=cond, body=body
        o1 = f32[6,3] get-tuple-element(w), index=1
        o2 = f32[6,3] get-tuple-element(w), index=2
        ROOT t = (f32[6,3], f32[6,3], f32[6,3]) tuple(o1, o2, e)""", comps)
    x = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    saved = x.copy()
    ours, want = run_both(text, [x])
    for g, w in zip(ours, want):
        assert_matches(g, w, 2, "loop")
    assert np.array_equal(x, saved)


@pytest.mark.parametrize("index", [-1, 0, 1, 2, 7])
def test_conditional_by_index_clamps_to_the_last_branch(index):
    comps = """b0 { p = f32[3] parameter(0)
 ROOT r = f32[3] negate(p) }
b1 { p = f32[3] parameter(0)
 ROOT r = f32[3] exponential(p) }
b2 { p = f32[3] parameter(0)
 ROOT r = f32[3] copy(p) }"""
    text = module("""
        i = s32[] parameter(0)
        x = f32[3] parameter(1)
        ROOT c = f32[3] conditional(i, x, x, x), branch_computations={b0, b1, b2}""", comps)
    ours, want = run_both(text, [np.int32(index), np.array([1, -2, 0.5], np.float32)])
    assert_matches(ours[0], want[0], 1, "conditional")


def test_conditional_by_pred_and_call_inlining():
    comps = """t { p = f32[2] parameter(0)
 ROOT r = f32[2] add(p, p) }
f { p = f32[2] parameter(0)
 ROOT r = f32[2] multiply(p, p) }
sq { p = f32[2] parameter(0)
 q = f32[2] parameter(1)
 ROOT r = f32[2] subtract(p, q) }"""
    text = module("""
        b = pred[] parameter(0)
        x = f32[2] parameter(1)
        c = f32[2] conditional(b, x, x), true_computation=t, false_computation=f
        ROOT k = f32[2] call(c, x), to_apply=sq""", comps)
    for b in (True, False):
        ours, want = run_both(text, [np.bool_(b), np.array([3, -4], np.float32)])
        assert_matches(ours[0], want[0], 0, f"pred {b}")


def test_outputs_that_are_parameters_constants_or_repeated():
    text = module("""
        x = f32[3] parameter(0)
        p = (f32[3], s32[]) parameter(1)
        k = f32[2] constant({7, 8})
        e = f32[3] exponential(x)
        r = f32[1,3] reshape(e)
        g = s32[] get-tuple-element(p), index=1
        ROOT t = (f32[3], f32[2], f32[3], f32[3], f32[1,3], s32[]) tuple(x, k, e, e, r, g)""")
    x = np.array([0, 1, 2], np.float32)
    exe = hlo_opt.compile(text)
    out = exe(x, (np.zeros(3, np.float32), np.int32(9)))
    want = hlo_opt.evaluate(hlo_opt.parse(text), [x, (np.zeros(3, np.float32), np.int32(9))])
    for g, w in zip(out, want):
        assert_matches(g, w, 2, "outputs")
    assert out[2] is not out[3] and out[0] is not x


def test_buffers_are_reused_along_a_chain():
    """Ten kernels in a row (a reduction down the columns and the loop broadcasting its
    result cannot share one: every row of the loop needs all of it), each writing 64 KiB:
    live ranges overlap pairwise only, so the arena holds a few buffers, not ten."""
    lines = ["x = f32[128,128] parameter(0)", "z = f32[] constant(0)"]
    prev = "x"
    for i in range(10):
        lines.append(f"s{i} = f32[128] reduce({prev}, z), dimensions={{0}}, to_apply=add")
        lines.append(f"b{i} = f32[128,128] broadcast(s{i}), dimensions={{1}}")
        lines.append(f"n{i} = f32[128,128] add({prev}, b{i})")
        prev = f"n{i}"
    lines.append(f"ROOT r = f32[128,128] negate({prev})")
    exe = hlo_opt.compile(module("\n".join(lines), ADD))
    assert exe.stats["kernel_calls"] >= 10
    assert exe.stats["peak_bytes"] <= 3 * 128 * 128 * 4
    x = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
    want = hlo_opt.evaluate(exe.module, [x])[0]
    assert_matches(exe(x)[0], want, 0, "chain", atol=1e-5 * np.abs(want).max())


def test_fallback_is_loud_and_correct():
    text = module("""
        x = f32[4,4] parameter(0)
        t = f32[4,4] transpose(x), dimensions={1,0}
        d = f32[4,4] dot(x, t), lhs_contracting_dims={1}, rhs_contracting_dims={0}
        c = f32[4,4] cholesky(d), lower=true
        ROOT n = f32[4,4] negate(c)""")
    with pytest.warns(FallbackWarning, match="cholesky"):
        exe = hlo_opt.compile(hlo_opt.parse(text.replace("HloModule t", "HloModule fb")))
    assert any("cholesky" in f for f in exe.stats["fallbacks"])
    x = (np.eye(4) * 3 + np.arange(16).reshape(4, 4) / 10).astype(np.float32)
    want = hlo_opt.evaluate(exe.module, [x])[0]
    assert_matches(exe(x)[0], want, 4, "cholesky fallback", atol=1e-5)


def test_fallback_errors_surface_as_exceptions():
    text = module("""
        x = c64[4] parameter(0)
        ROOT a = c64[4] atan2(x, x)""")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        exe = hlo_opt.compile(text)
    with pytest.raises(HloError, match="atan2 of complex"):
        exe(np.zeros(4, np.complex64))


@pytest.mark.parametrize("body,refused", [
    ("""x = f32[4] parameter(0)
        ROOT a = f32[8] all-gather(x), dimensions={0}, replica_groups={{0,1}}""",
     "5:8: all-gather (a)"),
    ("""x = f32[8] parameter(0)
        i = s32[] parameter(1)
        s = ((f32[8], s32[]), f32[2], u32[]) dynamic-slice-start(x, i), dynamic_slice_sizes={2}
        ROOT d = f32[2] dynamic-slice-done(s)""", "7:8: dynamic-slice-done (d)"),
    ("""x = f32[4] parameter(0)
        ROOT c = f32[4] custom-call(x), custom_call_target="no_such_target" """,
     "5:8: custom-call (c)"),
])
def test_ops_nothing_can_run_are_refused_at_compile_time(body, refused):
    """No kernel emitter and no interpreter rule: an error naming the op and its line,
    from compile, not a KeyError when the program runs."""
    with pytest.raises(UnsupportedError, match=f"{re.escape(refused)} cannot run"):
        hlo_opt.compile(module(body))


def test_side_effects_no_result_uses_are_refused_not_skipped():
    """The compiled program runs only what the results depend on; an effect it cannot
    produce is refused at compile time wherever it is (the interpreter's cases)."""
    from test_interpreter import DEAD_SIDE_EFFECTS
    for dead, where, target in DEAD_SIDE_EFFECTS:
        text = f"HloModule m\nENTRY e {{\nx = f32[3] parameter(0)\n{dead}\n" \
            "ROOT y = f32[3] multiply(x, x)\n}\n"
        with pytest.raises(UnsupportedError, match=f"{re.escape(where)}.*{re.escape(target)}"):
            hlo_opt.compile(text)


@pytest.mark.parametrize("target", ["LayoutConstraint", "Sharding", "SPMDFullToShardShape",
                                    "SPMDShardToFullShape"])
def test_layout_and_sharding_annotations_compile_as_copies(target):
    """Identity custom calls run in kernels (a copy into the result's layout), not in the
    interpreter."""
    text = f"""HloModule m
ENTRY e {{
  x = f32[4,3] parameter(0)
  c = f32[4,3]{{0,1}} custom-call(x), custom_call_target="{target}", sharding={{replicated}}
  ROOT y = f32[4,3] multiply(c, c)
}}
"""
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        exe = hlo_opt.compile(text)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert not exe.stats["fallbacks"]
    np.testing.assert_array_equal(exe(x)[0], x * x)


def test_identical_kernels_compile_once():
    body = "\n".join(f"""y{i} = f32[64] parameter({i})
        e{i} = f32[64] exponential(y{i})
        r{i} = f32[] reduce(e{i}, z), dimensions={{0}}, to_apply=add""" for i in range(4))
    text = module("z = f32[] constant(0)\n" + body + "\nROOT t = (f32[], f32[], f32[], f32[]) "
                  "tuple(r0, r1, r2, r3)", ADD)
    exe = hlo_opt.compile(text)
    assert exe.stats["kernel_calls"] == 4 and exe.stats["kernels"] == 1
    before = jit.stats["compiled"]
    hlo_opt.compile(text.replace("HloModule t", "HloModule again"))
    assert jit.stats["compiled"] == before


def test_compiled_modules_and_kernels_are_cached_up_to_a_bound(monkeypatch):
    """Distinct modules beyond the bound push the least recently used out; an evicted
    executable still runs (its machine code stays loaded), and a module compiled again
    after eviction reuses the kernels' machine code instead of compiling it twice."""
    from hlo_opt.lowering import runtime
    monkeypatch.setattr(runtime, "_executables", runtime.LruCache(3))
    monkeypatch.setattr(runtime, "_kernels", runtime.LruCache(2))
    texts = [module(f"x = f32[{n}] parameter(0)\nc = f32[] constant(2)\n"
                    f"b = f32[{n}] broadcast(c), dimensions={{}}\n"
                    f"ROOT m = f32[{n}] multiply(x, b)") for n in range(1, 9)]
    exes = [hlo_opt.compile(t) for t in texts]
    assert len(runtime._executables) == 3 and len(runtime._kernels) == 2
    first = exes[0]
    assert first(np.array([1.5], np.float32))[0].tolist() == [3.0]
    before = jit.stats["compiled"]
    again = hlo_opt.compile(texts[0])
    assert again is not first and jit.stats["compiled"] == before
    assert again(np.array([4.0], np.float32))[0].tolist() == [8.0]


def test_arguments_are_checked():
    exe = hlo_opt.compile(module("x = f32[2] parameter(0)\nROOT n = f32[2] negate(x)"))
    with pytest.raises(HloError, match="dtype"):
        exe(np.zeros(2, np.float64))
    with pytest.raises(HloError, match="dims"):
        exe(np.zeros(3, np.float32))
    assert exe([1.0, 2.0])[0].tolist() == [-1.0, -2.0]


def test_concurrent_calls_from_python_threads():
    text = module("""
        x = f32[256,256] parameter(0)
        y = f32[256,256] parameter(1)
        d = f32[256,256] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
        ROOT t = f32[256,256] tanh(d)""")
    exe = hlo_opt.compile(text)
    rng = np.random.default_rng(0)
    inputs = [(rng.standard_normal((256, 256)).astype(np.float32) * 0.1,
               rng.standard_normal((256, 256)).astype(np.float32) * 0.1) for _ in range(4)]
    expected = [exe(*a)[0] for a in inputs]
    results = [None] * 4

    def work(k):
        for _ in range(5):
            results[k] = exe(*inputs[k])[0]
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r, e in zip(results, expected):
        assert np.array_equal(r, e)


def test_emit_llvm_and_asm_list_every_kernel():
    text = module("""
        x = f32[1024] parameter(0)
        ROOT e = f32[1024] exponential(x)""")
    ll = emit_llvm(hlo_opt.parse(text))
    assert "define" in ll and "driver_" in ll and "fma" in ll
    asm = emit_asm(hlo_opt.parse(text))
    widest = {512: "%zmm", 256: "%ymm", 128: "%xmm"}[cpu_facts.vector_isa()]
    assert "driver_" in asm and widest in asm         # the loop is vectorized


def test_hlo_run_cli(tmp_path, capsys):
    from hlo_opt.tools.hlo_run import main
    src = tmp_path / "m.hlo"
    src.write_text(module("x = f32[3] parameter(0)\nROOT s = f32[3] sqrt(x)"))
    np.savez(tmp_path / "in.npz", arg0=np.array([1, 4, 9], np.float32))
    out = tmp_path / "out.npz"
    for target in ("cpu", "interp"):
        assert main([str(src), f"--target={target}", "--inputs", str(tmp_path / "in.npz"),
                     "--out", str(out), "--time", "3"]) == 0
        assert np.load(out)["out0"].tolist() == [1, 2, 3]
    assert "median" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.hlo")]) == 2


def test_flush_denormals_is_xla_mode_and_restores_the_callers_mode():
    text = module("""
        x = f32[4096] parameter(0)
        y = f32[4096] parameter(1)
        ROOT m = f32[4096] multiply(x, y)""")
    x = np.full(4096, 1e-20, np.float32)
    y = np.full(4096, 1e-20, np.float32)          # 1e-40: a denormal product
    ieee = hlo_opt.compile(text)(x, y)[0]
    assert ieee[0] != 0 and np.isclose(ieee[0], np.float32(1e-40), rtol=1e-3)
    ftz = hlo_opt.compile(text, flush_denormals=True)(x, y)[0]
    assert np.all(ftz == 0)
    assert np.float32(1e-20) * np.float32(1e-20) != 0      # numpy's mode is untouched


def test_outputs_can_be_written_into_given_arrays():
    exe = hlo_opt.compile(module("x = f32[3] parameter(0)\nROOT n = f32[3] negate(x)"))
    out = [np.empty(3, np.float32)]
    result = exe.run([np.array([1, 2, 3], np.float32)], out)
    assert result[0] is out[0] and out[0].tolist() == [-1, -2, -3]
    with pytest.raises(HloError, match="out="):
        exe.run([np.zeros(3, np.float32)], [np.empty(4, np.float32)])


LARGE_NEGATE = module("x = f32[1024,512] parameter(0)\nROOT n = f32[1024,512] negate(x)")


def _filled(value: float) -> np.ndarray:
    return np.full((1024, 512), value, np.float32)


def test_a_large_output_reuses_the_memory_of_one_the_caller_let_go_of():
    """Fresh pages fault on first write: a call's large output takes the memory of an
    earlier output nothing refers to any more."""
    exe = hlo_opt.compile(LARGE_NEGATE)
    output_pool.clear()
    [first] = exe.run([_filled(1)])
    address = first.ctypes.data
    del first
    [second] = exe.run([_filled(2)])
    assert second.ctypes.data == address and np.all(second == -2)
    assert second.flags.c_contiguous and second.flags.writeable and second.dtype == np.float32


@pytest.mark.parametrize("keep", [lambda a: a, lambda a: a[3:5, ::2], lambda a: a.reshape(-1),
                                  memoryview], ids=["array", "slice", "reshape", "memoryview"])
def test_memory_the_caller_still_reaches_is_never_handed_out_again(keep):
    """An output, or anything derived from it that the caller keeps after dropping the
    output itself, keeps its values through any number of later calls."""
    exe = hlo_opt.compile(LARGE_NEGATE)
    output_pool.clear()
    [out] = exe.run([_filled(1)])
    kept = keep(out)
    del out
    for value in range(2, 6):
        exe.run([_filled(value)])
    assert np.all(np.asarray(kept) == -1)


@pytest.mark.parametrize("dtype", ["bf16", "f8e4m3fn", "f16", "s8"])
def test_a_large_pooled_output_keeps_its_element_type(dtype):
    """Pooled memory is handed out as arrays of the module's element types, the numpy
    extension types (bfloat16, the float8s) included, not as raw bytes."""
    exe = hlo_opt.compile(module(f"x = {dtype}[1024,1024] parameter(0)\n"
                                 f"ROOT n = {dtype}[1024,1024] negate(x)"))
    x = np.ones((1024, 1024), exe.module.entry.parameters[0].shape.dtype.numpy)
    output_pool.clear()
    for _ in range(2):                      # a fresh block, then a reused one
        [out] = exe.run([x])
        assert out.dtype == x.dtype and out.shape == x.shape
        np.testing.assert_array_equal(out.astype(np.float32), -x.astype(np.float32))
        del out


def test_the_pool_keeps_a_bounded_amount_of_free_memory(monkeypatch):
    monkeypatch.setattr(output_pool, "POOL_BYTES", 3 << 20)
    output_pool.clear()
    arrays = [output_pool.take((1 << 18,), np.float32) for _ in range(4)]     # 1 MiB each
    del arrays
    assert output_pool.free_bytes() == 3 << 20
    monkeypatch.undo()
    output_pool.clear()


def test_kernel_formation_groups_unfused_modules_only():
    """An unfused chain becomes one kernel; a module with fusion instructions keeps XLA's
    (or our optimizer's) decisions: each fusion one kernel, each other op one more."""
    chain = """
        x = f32[64] parameter(0)
        a = f32[64] add(x, x)
        m = f32[64] multiply(a, x)
        ROOT n = f32[64] negate(m)"""
    assert hlo_opt.compile(module(chain)).stats["kernel_calls"] == 1
    fused = module("""
        x = f32[64] parameter(0)
        f = f32[64] fusion(x), kind=kLoop, calls=body
        m = f32[64] multiply(f, x)
        ROOT n = f32[64] negate(m)""", "body { p = f32[64] parameter(0)\n e = f32[64] exponential(p)\n"
                                       " ROOT s = f32[64] add(e, p) }")
    exe = hlo_opt.compile(fused)
    assert exe.stats["kernel_calls"] == 3
    x = np.linspace(-2, 2, 64).astype(np.float32)
    assert_matches(exe(x)[0], hlo_opt.evaluate(exe.module, [x])[0], 2, "fused module", atol=1e-6)


# A backward scan's weight-gradient accumulator: g = g + transpose(dot(d, x)) per step.
ACCUMULATE = """cond {
  n = s32[] constant(5)
  s = (s32[], f32[8,16], f32[5,4,8], f32[5,4,16]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  z = s32[] constant(0)
  one = s32[] constant(1)
  s = (s32[], f32[8,16], f32[5,4,8], f32[5,4,16]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  g = f32[8,16] get-tuple-element(s), index=1
  ds = f32[5,4,8] get-tuple-element(s), index=2
  xs = f32[5,4,16] get-tuple-element(s), index=3
  d3 = f32[1,4,8] dynamic-slice(ds, i, z, z), dynamic_slice_sizes={1,4,8}
  d = f32[4,8] reshape(d3)
  x3 = f32[1,4,16] dynamic-slice(xs, i, z, z), dynamic_slice_sizes={1,4,16}
  x = f32[4,16] reshape(x3)
  p = f32[16,8] dot(x, d), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  t = f32[8,16] transpose(p), dimensions={1,0}
  g2 = f32[8,16] add(g, t)
  j = s32[] add(i, one)
  ROOT r = (s32[], f32[8,16], f32[5,4,8], f32[5,4,16]) tuple(j, g2, ds, xs)
}"""


def test_a_loops_gradient_accumulator_is_added_to_in_place():
    """g + transpose(dot(...)) reads each element of g at the index it writes: the kernel
    writes the sum over g's own buffer, so the loop neither makes a new array nor copies it
    into its state each step."""
    from hlo_opt.lowering.program import Copy, KernelStep, While
    from hlo_opt.lowering.runtime import build
    body = ACCUMULATE
    text = module("""
        ds = f32[5,4,8] parameter(0)
        xs = f32[5,4,16] parameter(1)
        g0 = f32[8,16] parameter(2)
        zero = s32[] constant(0)
        e = f32[8,16] exponential(g0)
        init = (s32[], f32[8,16], f32[5,4,8], f32[5,4,16]) tuple(zero, e, ds, xs)
        w = (s32[], f32[8,16], f32[5,4,8], f32[5,4,16]) while(init), condition=cond, body=body
        ROOT g = f32[8,16] get-tuple-element(w), index=1""", body)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((5, 4, 8), (5, 4, 16), (8, 16))]
    saved = [a.copy() for a in args]
    ours, want = run_both(text, args)
    assert_matches(ours[0], want[0], 8, "accumulated", atol=1e-5)
    assert all(np.array_equal(a, s) for a, s in zip(args, saved))
    program = build(hlo_opt.parse(text))[0]
    [loop] = [s for s in program.steps if isinstance(s, While)]
    assert loop.body_results[1] is loop.state[1]
    assert not any(isinstance(s, Copy) for s in loop.body.steps)
    [add] = [s for s in loop.body.steps if isinstance(s, KernelStep) and loop.state[1] in s.outs]
    assert loop.state[1] in add.ins


# The product scaled before the transpose (g + transpose(dot * 0.5)): fusion leaves the
# transpose, the GEMM's epilogue reads the dot through it (phases.epilogue_transposes).
SCALED = """  h = f32[] constant(0.5)
  hb = f32[16,8] broadcast(h), dimensions={}
  ps = f32[16,8] multiply(p, hb)
  t = f32[8,16] transpose(ps), dimensions={1,0}
"""


@pytest.mark.parametrize("k, in_place", [(32, True), (2048, False)])
@pytest.mark.parametrize("scaled", [False, True])
def test_a_gemm_adds_its_product_to_the_accumulator_in_place_when_it_writes_it_once(
        k, in_place, scaled):
    """g + transpose(dot(x, d)) at GEMM sizes is one kernel, the dot computed transposed
    with the add as its epilogue (one phase). Its K in one block, each element is finished
    before it is stored: the kernel writes over g. Deeper, partial sums would be stored
    over g before the epilogue reads it: a buffer of its own."""
    from hlo_opt.lowering.fallback import why_not
    from hlo_opt.lowering.phases import split
    from hlo_opt.lowering.program import While
    from hlo_opt.lowering.runtime import build
    body = ACCUMULATE
    if scaled:
        body = body.replace("  t = f32[8,16] transpose(p), dimensions={1,0}\n", SCALED)
    for old, new in (("f32[8,16]", "f32[48,64]"), ("f32[16,8]", "f32[64,48]"),
                     ("4,8", f"{k},48"), ("4,16", f"{k},64"), ("[4,8]", f"[{k},48]"),
                     ("[4,16]", f"[{k},64]"), ("[5,", "[9,"), ("constant(5)", "constant(9)")):
        body = body.replace(old, new)       # 9 steps: a loop, not unrolled (fusion/unroll.py)
    text = module(f"""
        ds = f32[9,{k},48] parameter(0)
        xs = f32[9,{k},64] parameter(1)
        g0 = f32[48,64] parameter(2)
        zero = s32[] constant(0)
        e = f32[48,64] exponential(g0)
        init = (s32[], f32[48,64], f32[9,{k},48], f32[9,{k},64]) tuple(zero, e, ds, xs)
        w = (s32[], f32[48,64], f32[9,{k},48], f32[9,{k},64]) while(init), condition=cond, body=body
        ROOT g = f32[48,64] get-tuple-element(w), index=1""", body)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((9, k, 48), (9, k, 64), (48, 64))]
    ours, want = run_both(text, args)
    assert_matches(ours[0], want[0], 8, "accumulated", atol=1e-3)
    [loop] = [s for s in build(hlo_opt.parse(text))[0].steps if isinstance(s, While)]
    [gemm] = [s for s in loop.body.steps if loop.body_results[1] in s.outs]
    assert {"dot", "add"} <= {i.opcode for i in gemm.kernel.comp.instructions}
    assert any(i.opcode == "transpose" for s in loop.body.steps
               for i in s.kernel.comp.instructions) == scaled
    assert ("add", "dot") in [(p.root.opcode, p.hero.opcode)
                              for p in split(gemm.kernel.comp, why_not, epilogues=True)]
    assert (loop.body_results[1] is loop.state[1]) == in_place


@pytest.mark.parametrize("body", [
    # The old value is a result too.
    """s = f32[6,5] sine(e)
       a = f32[6,5] add(s, y)
       ROOT t = (f32[6,5], f32[6,5]) tuple(a, s)""",
    # The old value is read after the add, at other indices.
    """a = f32[6,5] add(e, y)
       r = f32[6,5] reverse(e), dimensions={0}
       m = f32[6,5] multiply(a, r)
       ROOT t = (f32[6,5], f32[6,5]) tuple(m, a)""",
    # The add reads its operand at other indices too.
    """r = f32[6,5] reverse(e), dimensions={1}
       ROOT a = f32[6,5] add(e, r)""",
])
def test_an_elementwise_kernel_never_writes_over_a_value_still_read(body):
    text = module("""p = f32[6,5] parameter(0)
        y = f32[6,5] parameter(1)
        e = f32[6,5] sort(p), dimensions={1}, to_apply=lt
        """ + body, """lt { a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT r = pred[] compare(a, b), direction=LT }""")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((6, 5)).astype(np.float32) for _ in range(2)]
    ours, want = run_both(text, args)
    for g, w in zip(ours, want):
        assert_matches(g, w, 2, "elementwise")


def test_loop_state_elements_starting_from_one_zeros_array_each_get_it_written():
    """Two accumulators start from one broadcast zero: instead of copying that array into
    the second's buffer before the loop, the broadcast is computed there too; no state
    element is copied in, and the two diverge."""
    from hlo_opt.lowering.program import While
    from hlo_opt.lowering.runtime import build
    comps = """cond {
  s = (s32[], f32[6,3], f32[6,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[6,3], f32[6,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  a = f32[6,3] get-tuple-element(s), index=1
  b = f32[6,3] get-tuple-element(s), index=2
  f = f32[] convert(i)
  r = f32[6,3] broadcast(f), dimensions={}
  a2 = f32[6,3] add(a, r)
  b2 = f32[6,3] multiply(b, a2)
  e = f32[6,3] exponential(b2)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[6,3], f32[6,3]) tuple(j, a2, e)
}"""
    text = module("""
        zero = s32[] constant(0)
        c = f32[] constant(0)
        z = f32[6,3] broadcast(c), dimensions={}
        init = (s32[], f32[6,3], f32[6,3]) tuple(zero, z, z)
        w = (s32[], f32[6,3], f32[6,3]) while(init), condition=cond, body=body
        a = f32[6,3] get-tuple-element(w), index=1
        b = f32[6,3] get-tuple-element(w), index=2
        ROOT t = (f32[6,3], f32[6,3], f32[6,3]) tuple(a, b, z)""", comps)
    ours, want = run_both(text, [])
    for g, w in zip(ours, want):
        assert_matches(g, w, 4, "accumulators", atol=1e-6)
    program = build(hlo_opt.parse(text))[0]
    [loop] = [s for s in program.steps if isinstance(s, While)]
    assert loop.init[1] is loop.state[1] and loop.init[2] is loop.state[2]


def checked_loop_profile(text: str, h_shape, w_shape, seed: int):
    """Run a module of inputs (h, w) (w scaled to keep a recurrence bounded) compiled and
    in the interpreter, check they agree, and return its profile rows over two calls."""
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(h_shape).astype(np.float32),
            (rng.standard_normal(w_shape) / 6).astype(np.float32)]
    (got,), (want,) = run_both(text, args)
    assert_matches(got, want, 64, "h", atol=1e-5)
    return hlo_opt.compile(text).profile(args, calls=2)


def counting_cond(state: str, steps: int) -> str:
    """A loop condition over `state` (a counter first): run `steps` times."""
    return f"""cond {{
  s = {state} parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant({steps})
  ROOT c = pred[] compare(i, n), direction=LT
}}"""


RNN_STEP = """
cond {{
  s = (s32[], f32[24,40], f32[56,40]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(7)
  ROOT c = pred[] compare(i, n), direction=LT
}}
body {{
  s = (s32[], f32[24,40], f32[56,40]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  h = f32[24,40] get-tuple-element(s), index=1
  w = f32[56,40] get-tuple-element(s), index=2
  one = s32[] constant(1)
  j = s32[] add(i, one)
  {weight}
  d = f32[24,56] dot(h, {b}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
  hd = f32[24,40] slice(d), slice={{[0:24], [8:48]}}
  h2 = f32[24,40] tanh(hd)
  ROOT t = (s32[], f32[24,40], f32[56,40]) tuple(j, h2, {next_w})
}}"""


@pytest.mark.parametrize("weight,b,next_w,packs", [
    ("", "w", "w", 1),                                      # the loop passes w through
    ("k = f32[56,40] constant({...})", "k", "w", 1),        # a constant of the body
    ("half = f32[] constant(0.5)\n  hb = f32[56,40] broadcast(half), dimensions={}\n"
     "  w2 = f32[56,40] multiply(w, hb)", "w", "w2", 0),    # the loop changes it
])
def test_a_loop_invariant_gemm_operand_is_packed_once_per_call(weight, b, next_w, packs):
    """x @ W^T in a loop body (an RNN step, its gradient): a B operand the loop never
    changes is packed into panels once, before the loop (loop_packing.py), not once per
    iteration; the dot runs every iteration on those panels. A weight the loop updates is
    packed where it is used."""
    text = module("""
        h0 = f32[24,40] parameter(0)
        w0 = f32[56,40] parameter(1)
        zero = s32[] constant(0)
        init = (s32[], f32[24,40], f32[56,40]) tuple(zero, h0, w0)
        loop = (s32[], f32[24,40], f32[56,40]) while(init), condition=cond, body=body
        ROOT h = f32[24,40] get-tuple-element(loop), index=1""",
                  RNN_STEP.format(weight=weight, b=b, next_w=next_w))
    rows = checked_loop_profile(text, (24, 40), (56, 40), 0)
    calls = {label.split(" ")[0]: n for label, _, n, _ in rows}
    assert sum(n for label, n in calls.items() if label.endswith(".pack")) == packs
    assert calls["d"] == 7                                  # the dot, every iteration


def test_loop_invariant_batched_operand_is_packed_once_per_batch_and_panel():
    """Batched x @ W^T over 3 batches, 70 columns (partial last panel): the panels packed
    before the loop are found batch by batch."""
    state = "(s32[], f32[3,20,40], f32[3,70,40])"
    text = module(f"""
        h0 = f32[3,20,40] parameter(0)
        w0 = f32[3,70,40] parameter(1)
        zero = s32[] constant(0)
        init = {state} tuple(zero, h0, w0)
        loop = {state} while(init), condition=cond, body=body
        ROOT h = f32[3,20,40] get-tuple-element(loop), index=1""", f"""
{counting_cond(state, 4)}
body {{
  s = {state} parameter(0)
  i = s32[] get-tuple-element(s), index=0
  h = f32[3,20,40] get-tuple-element(s), index=1
  w = f32[3,70,40] get-tuple-element(s), index=2
  one = s32[] constant(1)
  j = s32[] add(i, one)
  d = f32[3,20,70] dot(h, w), lhs_batch_dims={{0}}, rhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_contracting_dims={{2}}
  t = f32[3,20,70] tanh(d)
  h2 = f32[3,20,40] slice(t), slice={{[0:3], [0:20], [3:43]}}
  ROOT r = {state} tuple(j, h2, w)
}}""")
    rows = checked_loop_profile(text, (3, 20, 40), (3, 70, 40), 1)
    assert [n for label, _, n, _ in rows if ".pack " in label] == [1]


def test_a_gemm_computing_its_product_transposed_packs_its_own_operands_in_a_loop():
    """tanh((h @ W^T)^T) in a loop body: the GEMM computes W h^T, its B is h (which the loop
    changes), so the invariant W is not packed before the loop; the answer is the
    interpreter's."""
    state = "(s32[], f32[40,40], f32[40,40])"
    text = module(f"""
        h0 = f32[40,40] parameter(0)
        w0 = f32[40,40] parameter(1)
        zero = s32[] constant(0)
        init = {state} tuple(zero, h0, w0)
        loop = {state} while(init), condition=cond, body=body
        ROOT h = f32[40,40] get-tuple-element(loop), index=1""", f"""
{counting_cond(state, 4)}
fused_step {{
  h = f32[40,40] parameter(0)
  w = f32[40,40] parameter(1)
  d = f32[40,40] dot(h, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
  t = f32[40,40] transpose(d), dimensions={{1,0}}
  ROOT h2 = f32[40,40] tanh(t)
}}
body {{
  s = {state} parameter(0)
  i = s32[] get-tuple-element(s), index=0
  h = f32[40,40] get-tuple-element(s), index=1
  w = f32[40,40] get-tuple-element(s), index=2
  one = s32[] constant(1)
  j = s32[] add(i, one)
  h2 = f32[40,40] fusion(h, w), kind=kOutput, calls=fused_step
  ROOT r = {state} tuple(j, h2, w)
}}""")
    rows = checked_loop_profile(text, (40, 40), (40, 40), 2)
    assert not [label for label, _, _, _ in rows if ".pack " in label]
