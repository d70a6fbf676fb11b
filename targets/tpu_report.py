"""The TPU model's account of a module, kernel by kernel: `hlo-opt --target=tpu --stats`
prints it as a table, `--report=PATH` writes it as JSON.

    report = tpu_report(module, TpuCostModel("v6e"))
    print(report.table()); json.dumps(report.as_json())

Each kernel (a fusion or an op run on its own; loop bodies once, as CostModel.module_cost
counts them) gets its result layouts with their tiles, the share of the bytes it moves that is
tile padding, its MXU passes and their utilization, its VMEM blocks against one
TensorCore's capacity, and its time split into the roofline's parts with what bounds it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from ..kernels import executed_computations
from ..shape import AnyShape
from . import Work, kernel_view
from .tpu import TpuCostModel
from .tpu_kernels import array_dims, logical_bytes, mxu_use, padded
from .tpu_tiles import tile_text, tiling


@dataclass(frozen=True)
class KernelStats:
    name: str
    kind: str                   # the fusion kind, or the opcode of an op run on its own
    layouts: str                # its results' tiled layouts (and padded dims where they pad)
    logical_bytes: float        # bytes read and written, without padding
    hbm_bytes: float            # bytes read and written, whole tiles
    mxu_passes: int             # size^3 MXU passes, precision passes included
    mxu_utilization: float | None   # useful multiply-adds over the passes'; None: no MXU work
    vmem_bytes: float           # its VMEM blocks, double-buffered, on one TensorCore
    overhead_us: float
    compute_us: float
    memory_us: float
    time_us: float
    bound: str                  # compute, memory or overhead

    @property
    def padding(self) -> float:
        return 1.0 - self.logical_bytes / self.hbm_bytes if self.hbm_bytes else 0.0


@dataclass(frozen=True)
class TpuReport:
    generation: str
    vmem_capacity: int
    kernels: list[KernelStats]

    def totals(self) -> dict:
        ks = self.kernels
        hbm, logical = sum(k.hbm_bytes for k in ks), sum(k.logical_bytes for k in ks)
        passes = sum(k.mxu_passes for k in ks)
        used = sum(k.mxu_passes * k.mxu_utilization for k in ks if k.mxu_utilization)
        return {
            "kernels": len(ks),
            "hbm_bytes": hbm,
            "padding": 1.0 - logical / hbm if hbm else 0.0,
            "mxu_passes": passes,
            "mxu_utilization": used / passes if passes else None,
            "over_vmem": sum(k.vmem_bytes > self.vmem_capacity for k in ks),
            "time_us": sum(k.time_us for k in ks),
            "by_bound": {b: round(sum(k.time_us for k in ks if k.bound == b), 3)
                         for b in ("compute", "memory", "overhead")},
        }

    def as_json(self) -> dict:
        return {"generation": self.generation, "vmem_capacity_bytes": self.vmem_capacity,
                "kernels": [asdict(k) | {"padding": k.padding} for k in self.kernels],
                "totals": self.totals()}

    def table(self) -> str:
        rows = [("kernel", "layouts", "pad%", "MXU%", "VMEM", "bound", "est us")]
        for k in self.kernels:
            rows.append((k.name, k.layouts, f"{100 * k.padding:.1f}",
                         "-" if k.mxu_utilization is None else f"{100 * k.mxu_utilization:.1f}",
                         _vmem(k.vmem_bytes, self.vmem_capacity), k.bound,
                         f"{k.time_us:.2f}"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) if i < 2 or i == 5 else c.rjust(w)
                           for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
        t = self.totals()
        mxu = "-" if t["mxu_utilization"] is None else \
            f"{t['mxu_passes']:,} passes at {100 * t['mxu_utilization']:.1f}%"
        bounds = ", ".join(f"{b} {us:.2f}" for b, us in t["by_bound"].items())
        lines.append(f"total ({self.generation}): {t['kernels']} kernels, "
                     f"{t['hbm_bytes'] / 1e6:,.3f} MB HBM ({100 * t['padding']:.1f}% padding), "
                     f"MXU {mxu}, {t['over_vmem']} over VMEM, {t['time_us']:.2f} us "
                     f"(by bound: {bounds})")
        return "\n".join(lines)


def _vmem(nbytes: float, capacity: int) -> str:
    return f"{nbytes / 1024:,.0f}K {100 * nbytes / capacity:.1f}%"


def tpu_report(module, model: TpuCostModel) -> TpuReport:
    """Every kernel of `module` under `model` (a TpuCostModel of one generation)."""
    gen = model.generation
    kernels = []
    for comp in executed_computations(module):
        for inst in comp.instructions:
            if model.runs_as_kernel(inst):
                kernels.append(_kernel_stats(inst, model))
    return TpuReport(gen.name, gen.vmem_bytes, kernels)


def _kernel_stats(inst, model: TpuCostModel) -> KernelStats:
    view = kernel_view(inst)
    work = sum((model.member_work(m) for m in view.members), Work())
    values = [*view.inputs, *view.outputs]
    read = sum(model.value_bytes(i) for i in view.inputs)
    written = sum(model.value_bytes(o) for o in view.outputs)
    split = model.time_split(work, read, written)
    passes, macs = 0, 0.0
    for m in view.members:
        mxu = mxu_use(model.generation, m.opcode, m.shape, m.attrs,
                      [o.shape for o in m.operands])
        if mxu is not None:
            passes, macs = passes + mxu.passes * mxu.precision, macs + mxu.macs * mxu.precision
    size = model.generation.mxu_size
    return KernelStats(
        name=inst.name, kind=str(inst.attrs.get("kind", inst.opcode)),
        layouts=_layouts([o.shape for o in view.outputs]),
        logical_bytes=sum(logical_bytes(v.shape) for v in values),
        hbm_bytes=read + written, mxu_passes=passes,
        mxu_utilization=macs / (passes * size ** 3) if passes else None,
        vmem_bytes=model.vmem_footprint(work),
        overhead_us=split.overhead / 1000, compute_us=split.compute / 1000,
        memory_us=split.memory / 1000, time_us=split.total / 1000, bound=split.bound)


def _layouts(shapes: list[AnyShape]) -> str:
    """Results' layouts, one of a kind: "3x f32[2,32,4,16]{3,2,1,0:T(4,128)}"."""
    counts = Counter(_layout(s) for s in shapes)
    return " ".join(text if n == 1 else f"{n}x {text}" for text, n in counts.items())


def _layout(shape: AnyShape) -> str:
    """A result's shape with its layout and tiles as XLA prints them for TPU, and its
    padded dims when tiles pad it: f32[8,129]{1,0:T(8,128)}->[8,256]."""
    if shape.is_tuple:
        return "(" + _layouts(list(shape.elements)) + ")"
    dims, order = array_dims(shape), shape.minor_to_major
    tiles = tile_text(tiling(shape.element_type, dims, order))
    whole = padded(shape).dims
    return f"{shape.element_type}[{_ints(dims)}]{{{_ints(order)}{':' + tiles if tiles else ''}}}" \
           + (f"->[{_ints(whole)}]" if tuple(whole) != dims else "")


def _ints(values) -> str:
    return ",".join(map(str, values))
