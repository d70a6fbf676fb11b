"""Instruction attributes: typed values and their HLO text form, both directions.

The lexer hands every attribute value over as one raw text token; `decode` turns it into a
typed Python value by the attribute's name, `encode` prints it back. One table (`KINDS`)
says which names are typed; anything else is kept verbatim as `Raw`, so well-formed
attributes we do not interpret still survive a round trip.

Computation-valued attributes decode to `ComputationRef` (a name, or an inline body's text);
the parser resolves them to Computation objects, which `encode` prints by name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Raw:
    """An attribute kept exactly as written (metadata, sharding, backend_config, unknown)."""
    text: str


@dataclass(frozen=True, slots=True)
class ComputationRef:
    """An unresolved reference: a computation name, or `{ ... }` inline body text."""
    name: str
    inline_body: str | None = None


@dataclass(frozen=True, slots=True)
class Window:
    """Per-dimension window of convolution / reduce-window / select-and-scatter."""
    size: tuple[int, ...]
    stride: tuple[int, ...]
    pad: tuple[tuple[int, int], ...]
    lhs_dilate: tuple[int, ...]
    rhs_dilate: tuple[int, ...]
    rhs_reversal: tuple[bool, ...]

    @staticmethod
    def default(rank: int, size: tuple[int, ...] | None = None) -> Window:
        one = (1,) * rank
        return Window(size or one, one, ((0, 0),) * rank, one, one, (False,) * rank)

    @property
    def rank(self) -> int:
        return len(self.size)


@dataclass(frozen=True, slots=True)
class ConvDimLabels:
    """`dim_labels=b01f_01io->b01f`: which dimension of each operand plays which role."""
    lhs: str
    rhs: str
    out: str

    @staticmethod
    def _spatial(labels: str) -> tuple[int, ...]:
        digits = sorted((int(c), i) for i, c in enumerate(labels) if c.isdigit())
        return tuple(i for _, i in digits)

    @property
    def lhs_batch(self) -> int:
        return self.lhs.index("b")

    @property
    def lhs_feature(self) -> int:
        return self.lhs.index("f")

    @property
    def lhs_spatial(self) -> tuple[int, ...]:
        return self._spatial(self.lhs)

    @property
    def rhs_input_feature(self) -> int:
        return self.rhs.index("i")

    @property
    def rhs_output_feature(self) -> int:
        return self.rhs.index("o")

    @property
    def rhs_spatial(self) -> tuple[int, ...]:
        return self._spatial(self.rhs)

    @property
    def out_batch(self) -> int:
        return self.out.index("b")

    @property
    def out_feature(self) -> int:
        return self.out.index("f")

    @property
    def out_spatial(self) -> tuple[int, ...]:
        return self._spatial(self.out)


def _list_of(item: str, trailing_comma: bool = False) -> str:
    """Regex of a comma-separated list of `item` in braces."""
    comma = ",?\\s*" if trailing_comma else ""
    return rf"\{{\s*(?:{item}\s*(?:,\s*{item}\s*)*{comma})?\}}"


_INT_RE = r"-?[0-9]+"
_STRING_RE = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_BOOL_RE = r"(?:true|false)"
_NUMBER_RE = r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_SHAPE_INDEX_RE = _list_of(_INT_RE)
_ALIAS_RE = (rf"{_SHAPE_INDEX_RE}\s*:\s*\(\s*{_INT_RE}\s*,\s*{_SHAPE_INDEX_RE}\s*"
             rf"(?:,\s*(?:may|must)-alias\s*)?\)")
_TOLERANCE_RE = rf"(?:atol|rtol|ulps)=\s*{_NUMBER_RE}"

# The attributes a module header may carry, each with the form of its value where it is
# checked here (entry_computation_layout is parsed by the grammar, the rest carried).
MODULE_ATTRIBUTES: dict[str, re.Pattern | None] = {
    name: None if pattern is None else re.compile(pattern) for name, pattern in {
        "alias_passthrough_params": _BOOL_RE,
        "allow_spmd_sharding_propagation_to_output": rf"{_BOOL_RE}|{_list_of(_BOOL_RE)}",
        "allow_spmd_sharding_propagation_to_parameters": rf"{_BOOL_RE}|{_list_of(_BOOL_RE)}",
        "buffer_donor": _list_of(rf"\(\s*{_INT_RE}\s*,\s*{_SHAPE_INDEX_RE}\s*\)", True),
        "entry_computation_layout": None,
        "frontend_attributes": None,
        "input_output_alias": _list_of(_ALIAS_RE, True),
        "is_scheduled": _BOOL_RE,
        "num_partitions": _INT_RE,
        "origin_recovery_table": None,
        "replica_count": _INT_RE,
    }.items()}

SliceDim = tuple[int, int, int]             # (start, limit, stride)
PadDim = tuple[int, int, int]               # (low, high, interior)


class AttributeError_(ValueError):
    """A malformed attribute value; the parser attaches the position."""


# name -> kind. Kinds are decoded/encoded by the functions in _CODECS below.
KINDS: dict[str, str] = {
    **dict.fromkeys((
        "dimensions", "lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims",
        "rhs_batch_dims", "offset_dims", "collapsed_slice_dims", "start_index_map",
        "slice_sizes", "dynamic_slice_sizes", "update_window_dims", "inserted_window_dims",
        "scatter_dims_to_operand_dims", "operand_batching_dims", "start_indices_batching_dims",
        "input_batching_dims", "scatter_indices_batching_dims", "fft_length",
        "lhs_ragged_dims", "rhs_group_dims"), "ints"),
    **dict.fromkeys((
        "index", "iota_dimension", "index_vector_dim", "feature_group_count",
        "batch_group_count", "feature_index", "exponent_bits", "mantissa_bits", "k",
        "channel_id", "delta", "cross_program_prefetch_index", "inferred_dimension"), "int"),
    "epsilon": "float",
    **dict.fromkeys((
        "is_stable", "indices_are_sorted", "unique_indices", "largest", "constrain_layout",
        "use_global_device_ids", "custom_call_has_side_effect", "is_host_transfer",
        "is_composite", "left_side", "lower", "unit_diagonal"), "bool"),
    **dict.fromkeys((
        "custom_call_target", "infeed_config", "outfeed_config", "async_execution_thread"),
        "string"),
    **dict.fromkeys((
        "direction", "type", "kind", "distribution", "fft_type", "padding_type", "schedule",
        "api_version", "transpose_a", "algorithm"), "enum"),
    **dict.fromkeys((
        "to_apply", "calls", "condition", "body", "true_computation", "false_computation",
        "select", "scatter"), "computation"),
    **dict.fromkeys(("branch_computations", "called_computations"), "computations"),
    "window": "window",
    "padding": "padding",
    "slice": "slice",
    "dim_labels": "dim_labels",
    "operand_precision": "enum_list",
    "control-predecessors": "names",
    "result_accuracy": "result_accuracy",
    "metadata": "metadata",
}
# Kinds whose texts rarely repeat (one per instruction): decoded without a cache.
UNCACHED_KINDS = frozenset({"metadata"})

_PRECISIONS = "default high highest"
_DOT_ALGORITHMS = ("unset dot_any_f8_any_f8_f32 dot_any_f8_any_f8_f32_fast_accum dot_f16_f16_f16 "
                   "dot_f16_f16_f32 dot_bf16_bf16_bf16 dot_bf16_bf16_f32 dot_bf16_bf16_f32_x3 "
                   "dot_bf16_bf16_f32_x6 dot_bf16_bf16_f32_x9 dot_tf32_tf32_f32 "
                   "dot_tf32_tf32_f32_x3 dot_f32_f32_f32 dot_f64_f64_f64")
_RNG_ALGORITHMS = "rng_default rng_three_fry rng_philox"

# The values XLA's parser takes for each enum attribute (learned from XLA's proto enums and
# probed against jaxlib 0.10). Lower-case sets are matched ignoring case, as XLA does for
# them. `algorithm` is dot's or rng-bit-generator's: one name, both value sets.
ENUM_VALUES: dict[str, frozenset[str]] = {name: frozenset(values.split()) for name, values in {
    "direction": "EQ NE GE GT LE LT",
    "type": "FLOAT TOTALORDER SIGNED UNSIGNED",
    "kind": "kLoop kInput kOutput kCustom",
    "distribution": "rng_invalid rng_uniform rng_normal",
    "fft_type": "FFT IFFT RFFT IRFFT",
    "padding_type": "PADDING_INVALID PADDING_VALID PADDING_SAME",
    "schedule": "schedule_none schedule_latest schedule_earliest",
    "api_version": "api_version_original api_version_status_returning "
                   "api_version_status_returning_unified api_version_typed_ffi",
    "transpose_a": "TRANSPOSE_INVALID NO_TRANSPOSE TRANSPOSE ADJOINT",
    "algorithm": f"{_DOT_ALGORITHMS} {_RNG_ALGORITHMS}",
    "operand_precision": _PRECISIONS,
}.items()}
_IGNORES_CASE = frozenset(n for n, values in ENUM_VALUES.items()
                          if all(v.islower() for v in values))


def _ints(text: str) -> tuple:
    body = _braced_body(text)
    if "{" in body:                      # int list list, e.g. collective-permute slice_sizes
        return tuple(_ints(m) for m in re.findall(r"\{[^{}]*\}", body))
    items = [t for t in re.split(r"[,\s]+", body) if t]
    try:
        return tuple(int(t) for t in items)
    except ValueError:
        raise AttributeError_(f"expected a list of integers, got {text!r}") from None


def _encode_ints(value: tuple) -> str:
    if value and isinstance(value[0], tuple):
        return "{" + ",".join(_encode_ints(v) for v in value) + "}"
    return "{" + ",".join(map(str, value)) + "}"


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise AttributeError_(f"expected an integer, got {text!r}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise AttributeError_(f"expected a number, got {text!r}") from None


def _encode_float(value: float) -> str:
    return repr(float(value)).replace("e-0", "e-").replace("e+0", "e+")


def _bool(text: str) -> bool:
    if text not in ("true", "false"):
        raise AttributeError_(f"expected true or false, got {text!r}")
    return text == "true"


def _string(text: str) -> str:
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise AttributeError_(f"expected a quoted string, got {text!r}")
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)),
                  text[1:-1])


def encode_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _enum(name: str, text: str) -> str:
    values = ENUM_VALUES[name]
    if text not in values and not (name in _IGNORES_CASE and text.lower() in values):
        raise AttributeError_(f"{text!r} is not one of {', '.join(sorted(values))}")
    return text


_METADATA_KEYS = ("deduplicated_name|metadata_payload|op_name|op_type|profile_type|"
                  "scheduling_name|source_column|source_end_column|source_end_line|source_file|"
                  "source_line|stack_frame_id")
_METADATA_ITEM = rf"(?:{_METADATA_KEYS})=(?:{_STRING_RE}|-?[0-9]+|\{{[^{{}}]*\}})"
_METADATA_RE = rf"\{{\s*(?:,?\s*{_METADATA_ITEM}\s*)*\}}"     # a comma may precede each
_METADATA = re.compile(_METADATA_RE)


def _metadata(text: str) -> Raw:
    """`{op_name="a/b" source_line=3 ...}`, checked and carried."""
    if not _METADATA.fullmatch(text):
        raise AttributeError_(f"expected {{key=value ...}} with keys "
                              f"{_METADATA_KEYS.replace('|', ', ')}, got {text[:80]!r}")
    return Raw(text)


_RESULT_ACCURACY = re.compile(
    rf"\{{\s*(?:mode=\s*(?i:default|highest)|tolerance=\s*{_list_of(_TOLERANCE_RE)})\s*\}}")


def _result_accuracy(text: str) -> Raw:
    """`{mode=highest}` or `{tolerance={atol=0,rtol=0.5,ulps=1}}`, checked and carried."""
    if not _RESULT_ACCURACY.fullmatch(text):
        raise AttributeError_(f"expected {{mode=default|highest}} or {{tolerance={{atol=.., "
                              f"rtol=.., ulps=..}}}}, got {text!r}")
    return Raw(text)


def _computation(text: str) -> ComputationRef:
    if text.startswith("{"):
        return ComputationRef("", inline_body=text)
    name = text[1:] if text.startswith("%") else text
    if not re.fullmatch(r"[A-Za-z_][\w.\-]*", name):
        raise AttributeError_(f"expected a computation name, got {text!r}")
    return ComputationRef(name)


def _computations(text: str) -> tuple[ComputationRef, ...]:
    """`{b0, b1}`, or inline bodies `{ {...}, {...} }`."""
    return tuple(_computation(t) for t in split_top_level(_braced_body(text)))


_STRING = re.compile(_STRING_RE)


def split_top_level(text: str) -> list[str]:
    """Items of a comma-separated list, split outside braces, brackets, parentheses and
    strings; a trailing comma is allowed."""
    items, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            m = _STRING.match(text, i)
            i = m.end() if m else len(text)
            continue
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
        i += 1
    items.append(text[start:].strip())
    if len(items) > 1 and items[-1] == "":      # a trailing comma
        items.pop()
    return [] if items == [""] else items


def _names(text: str) -> tuple[str, ...]:
    return tuple(t.lstrip("%") for t in re.split(r"[,\s]+", _braced_body(text)) if t)


def _enum_list(name: str, text: str) -> tuple[str, ...]:
    return tuple(_enum(name, t) for t in re.split(r"[,\s]+", _braced_body(text)) if t)


def _braced_body(text: str) -> str:
    if not (text.startswith("{") and text.endswith("}")):
        raise AttributeError_(f"expected {{...}}, got {text!r}")
    return text[1:-1].strip()


def _xs(text: str, n: int | None, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split("x"))
    except ValueError:
        raise AttributeError_(f"bad window {what} {text!r}") from None
    if n is not None and len(values) != n:
        raise AttributeError_(f"window {what} has {len(values)} dimensions, size has {n}")
    return values


def _window(text: str) -> Window:
    body = _braced_body(text)
    fields: dict[str, str] = {}
    for item in body.split():
        key, eq, value = item.partition("=")
        if not eq or key in fields:
            raise AttributeError_(f"bad window field {item!r}")
        fields[key] = value
    unknown = set(fields) - {"size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal"}
    if unknown:
        raise AttributeError_(f"unknown window field {sorted(unknown)[0]!r}")
    if not fields:
        return Window.default(0)
    if "size" not in fields:
        raise AttributeError_("window needs a size")
    size = _xs(fields["size"], None, "size")
    w = Window.default(len(size), size)
    pad = w.pad
    if "pad" in fields:
        pad = tuple(_pad_pair(p) for p in fields["pad"].split("x"))
        if len(pad) != len(size):
            raise AttributeError_("window pad and size differ in rank")
    return Window(
        size,
        _xs(fields["stride"], len(size), "stride") if "stride" in fields else w.stride,
        pad,
        _xs(fields["lhs_dilate"], len(size), "lhs_dilate") if "lhs_dilate" in fields else w.lhs_dilate,
        _xs(fields["rhs_dilate"], len(size), "rhs_dilate") if "rhs_dilate" in fields else w.rhs_dilate,
        tuple(bool(v) for v in _xs(fields["rhs_reversal"], len(size), "rhs_reversal"))
        if "rhs_reversal" in fields else w.rhs_reversal)


def _pad_pair(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(-?\d+)_(-?\d+)", text)
    if not m:
        raise AttributeError_(f"bad window padding {text!r}")
    return int(m.group(1)), int(m.group(2))


def _encode_window(w: Window) -> str:
    if w.rank == 0:
        return "{}"
    x = lambda vals: "x".join(map(str, vals))
    parts = [f"size={x(w.size)}"]
    if any(s != 1 for s in w.stride):
        parts.append(f"stride={x(w.stride)}")
    if any(p != (0, 0) for p in w.pad):
        parts.append("pad=" + "x".join(f"{lo}_{hi}" for lo, hi in w.pad))
    if any(d != 1 for d in w.lhs_dilate):
        parts.append(f"lhs_dilate={x(w.lhs_dilate)}")
    if any(d != 1 for d in w.rhs_dilate):
        parts.append(f"rhs_dilate={x(w.rhs_dilate)}")
    if any(w.rhs_reversal):
        parts.append(f"rhs_reversal={x(int(r) for r in w.rhs_reversal)}")
    return "{" + " ".join(parts) + "}"


def _padding(text: str) -> tuple[PadDim, ...]:
    if text in ("{}", ""):
        return ()
    dims = []
    for part in text.split("x"):
        m = re.fullmatch(r"(-?\d+)_(-?\d+)(?:_(\d+))?", part)
        if not m:
            raise AttributeError_(f"bad padding {text!r}")
        dims.append((int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)))
    return tuple(dims)


def _encode_padding(value: tuple[PadDim, ...]) -> str:
    if not value:
        return "{}"
    return "x".join(f"{lo}_{hi}_{i}" if i else f"{lo}_{hi}" for lo, hi, i in value)


_SLICE_RANGES = re.compile(r"(?:\[[^\]]*\](?:\s*,\s*\[[^\]]*\])*)?")


def _slice(text: str) -> tuple[SliceDim, ...]:
    body = _braced_body(text)
    dims = []
    for m in re.finditer(r"\[([^\]]*)\]", body):
        nums = m.group(1).split(":")
        if len(nums) not in (2, 3):
            raise AttributeError_(f"bad slice range [{m.group(1)}]")
        try:
            start, limit, stride = (int(n) for n in (nums + ["1"])[:3])
        except ValueError:
            raise AttributeError_(f"bad slice range [{m.group(1)}]") from None
        dims.append((start, limit, stride))
    if not _SLICE_RANGES.fullmatch(body):
        raise AttributeError_(f"bad slice {text!r}")
    return tuple(dims)


def _encode_slice(value: tuple[SliceDim, ...]) -> str:
    return "{" + ", ".join(f"[{a}:{b}:{s}]" if s != 1 else f"[{a}:{b}]"
                           for a, b, s in value) + "}"


def _dim_labels(text: str) -> ConvDimLabels:
    m = re.fullmatch(r"([0-9bf?]{2,})_([0-9io?]{2,})->([0-9bf?]{2,})", text)
    if not m:
        raise AttributeError_(f"bad dim_labels {text!r}")
    return ConvDimLabels(*m.groups())


_CODECS = {
    "ints": (_ints, _encode_ints),
    "int": (_int, str),
    "float": (_float, _encode_float),
    "bool": (_bool, lambda v: "true" if v else "false"),
    "string": (_string, encode_string),
    "enum": (_enum, str),
    "computation": (_computation, lambda c: c.name),
    "computations": (_computations, lambda cs: "{" + ", ".join(c.name for c in cs) + "}"),
    "window": (_window, _encode_window),
    "padding": (_padding, _encode_padding),
    "slice": (_slice, _encode_slice),
    "dim_labels": (_dim_labels, lambda d: f"{d.lhs}_{d.rhs}->{d.out}"),
    "enum_list": (_enum_list, lambda v: "{" + ",".join(v) + "}"),
    "names": (_names, lambda v: "{" + ", ".join(v) + "}"),
    "result_accuracy": (_result_accuracy, None),        # decodes to Raw, printed verbatim
    "metadata": (_metadata, None),
}


def decode(name: str, text: str):
    """Typed value of attribute `name` written as `text`; Raw for names we only carry.

    Raises AttributeError_ with a message (no position) when a typed value is malformed.
    """
    kind = KINDS.get(name)
    if kind is None:
        return Raw(text)
    if kind in ("enum", "enum_list"):            # the value set depends on the name
        return _CODECS[kind][0](name, text)
    return _CODECS[kind][0](text)


def encode(name: str, value) -> str:
    """HLO text of an attribute value (inverse of decode)."""
    if isinstance(value, Raw):
        return value.text
    return _CODECS[KINDS[name]][1](value)
