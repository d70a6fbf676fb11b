"""Bitcasts rewritten to layout-free ops (hlo/layout_free.py): the same values, whatever
layouts the operand and result had, and no bitcast left."""
import numpy as np
import pytest

from hlo_opt import UnsupportedError, evaluate, parse
from hlo_opt.layout_free import rewrite_bitcasts

X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def _rewritten(text: str):
    module = parse(text)
    for comp in module.computations:
        rewrite_bitcasts(comp)
    return module


@pytest.mark.parametrize("operand, result, expected", [
    # Same order on both sides: a reshape of the row-major elements.
    ("f32[2,3,4]{2,1,0}", "f32[6,4]{1,0}", X.reshape(6, 4)),
    # {1,2,0} stores dims 0, 2, 1 major to minor: memory is X.transpose(0,2,1), read as [2,4,3].
    ("f32[2,3,4]{1,2,0}", "f32[2,4,3]{2,1,0}", X.transpose(0, 2, 1)),
    # The result's {0,1} views the memory [4,6] as its transpose [6,4].
    ("f32[2,3,4]{2,1,0}", "f32[6,4]{0,1}", X.reshape(4, 6).T),
    # Same width, another type: the bits reinterpreted.
    ("f32[2,3,4]{2,1,0}", "s32[24]{0}", X.reshape(24).view(np.int32)),
])
def test_bitcast_keeps_its_meaning(operand, result, expected):
    module = _rewritten(f"""HloModule m
ENTRY e {{
  p = {operand} parameter(0)
  ROOT b = {result} bitcast(p)
}}
""")
    assert "bitcast" not in {i.opcode for i in module.instructions()}
    assert module.entry.root.name == "b"
    np.testing.assert_array_equal(evaluate(module, [X])[0], expected)


def test_bitcast_between_widths_is_refused():
    with pytest.raises(UnsupportedError, match="bitcast between element widths"):
        _rewritten("""HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  ROOT b = s16[8] bitcast(p)
}
""")
