"""Ops that run other computations: call, fusion, while, conditional, map."""
from __future__ import annotations

from ..errors import UnsupportedError
from .apply import apply
from .sorting import topk_custom_call

# Custom-call targets that give back their operand's values: "LayoutConstraint" gives it
# the result's layout; "Sharding" (JAX emits it, e.g. beside a typed PRNG key) and the
# SPMD shape changes annotate how devices split it, nothing on one device (a change of
# shape there is no identity: the result check refuses it).
IDENTITY_CUSTOM_CALLS = ("LayoutConstraint", "Sharding", "SPMDFullToShardShape",
                         "SPMDShardToFullShape")
# Custom-call targets whose meaning XLA itself defines (XLA:CPU emits TopK when it
# optimizes); every other target is opaque to the interpreter.
CUSTOM_CALLS = {"TopK": topk_custom_call,
                **{target: lambda inst, args, ev: args[0] for target in IDENTITY_CUSTOM_CALLS}}


def call(inst, args, ev):
    return ev.call(inst.attrs["to_apply"], args)


def fusion(inst, args, ev):
    """A fusion computes what its fused computation computes; the kind is a schedule."""
    return ev.call(inst.attrs["calls"], args)


def while_(inst, args, ev):
    state = args[0]
    condition, body = inst.attrs["condition"], inst.attrs["body"]
    while bool(ev.call(condition, [state])):
        state = ev.call(body, [state])
    return state


def conditional(inst, args, ev):
    """A pred picks true (0) or false (1); an s32 index out of range picks the last branch."""
    selector = args[0]
    if "branch_computations" in inst.attrs:
        branches = inst.attrs["branch_computations"]
        index = int(selector)
        if not 0 <= index < len(branches):
            index = len(branches) - 1
    else:
        branches = [inst.attrs["true_computation"], inst.attrs["false_computation"]]
        index = 0 if bool(selector) else 1
    return ev.call(branches[index], [args[1 + index]])


def map_(inst, args, ev):
    return apply(ev, inst.attrs["to_apply"], args)[0].copy()


def custom_call(inst, args, ev):
    target = inst.attrs.get("custom_call_target", "?")
    if target in CUSTOM_CALLS:
        return CUSTOM_CALLS[target](inst, args, ev)
    raise UnsupportedError(f"custom-call (custom_call_target=\"{target}\") has no reference "
                           "semantics in the interpreter")


IMPLS = {"call": call, "fusion": fusion, "while": while_, "conditional": conditional,
         "map": map_, "custom-call": custom_call}
