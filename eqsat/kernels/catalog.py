"""The kernel catalog: a table, one row per op the e-graph knows by name.

Level-B rows (``outputs=None``) are library-independent semantic ops; each also stands for the
standalone kernel that runs it when nothing is fused. Fused rows give their semantics as Level-B
terms, one per output, in the op's output order; ``rewrites.kernels`` turns each fused row into a
fuse rule (semantics -> kernel, under the row's constraints) and an unlift rule (kernel already in
the graph -> semantics). Traffic formulas are AITER's (``reference/aiter-kernels.md`` §6).

``Catalog`` is an immutable value passed explicitly; ``DEFAULT_CATALOG`` is the built-in table and
``Catalog.extend`` returns a new one (how a user declares a hypothetical kernel).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from eqsat.kernels.spec import (
    KernelSpec,
    Operand,
    Traffic,
    contiguous,
    dtype_accepted,
    last_dim_divisible,
    params,
    power_of_two,
    rank,
    same_dtype,
    same_last_dim,
)

ACT_DTYPES = ("bfloat16", "float16")
SCALE_BYTES = 4
FP8_BYTES = 1


def _op(a: Mapping[str, object], name: str) -> Operand:
    value = a[name]
    assert isinstance(value, Operand)
    return value


def _groups(x: Operand, g: object) -> int:
    assert isinstance(g, int) and g > 0
    return x.rows * -(-x.shape[-1] // g)


def _rms(a: Mapping[str, object]) -> Traffic:
    x, w = _op(a, "x"), _op(a, "w")
    return Traffic(read=x.bytes + w.bytes, written=x.bytes)


def _add_rms(a: Mapping[str, object]) -> Traffic:
    x, w = _op(a, "x"), _op(a, "w")
    return Traffic(read=2 * x.bytes + w.bytes, written=2 * x.bytes)


def _quant_out(x: Operand, g: object) -> float:
    return x.numel * FP8_BYTES + _groups(x, g) * SCALE_BYTES


def _quant_group(a: Mapping[str, object]) -> Traffic:
    x = _op(a, "x")
    return Traffic(read=x.bytes, written=_quant_out(x, a["G"]))


def _rms_quant(a: Mapping[str, object]) -> Traffic:
    x, w = _op(a, "x"), _op(a, "w")
    return Traffic(read=x.bytes + w.bytes, written=_quant_out(x, a["G"]))


def _add_rms_quant(a: Mapping[str, object]) -> Traffic:
    x, w = _op(a, "x"), _op(a, "w")
    return Traffic(read=2 * x.bytes + w.bytes, written=x.bytes + _quant_out(x, a["G"]))


def _norm_quant_constraints(kernel: str) -> tuple[str, ...]:
    return (
        *rank("x", 2), *contiguous("x"), *same_dtype("x", "w"), *dtype_accepted(kernel, "x"),
        *rank("w", 1), *same_last_dim("x", "w"), *power_of_two("G"), *last_dim_divisible("x", "G"),
    )


_RMS_Q = "(QuantGroup (RmsNorm x w eps) G dt)"
_ADD_RMS = "(AddRmsNorm x r w eps)"
_ADD_RMS_Q = f"(QuantGroup (Get {_ADD_RMS} 0) G dt)"
_GPU = frozenset({"gfx942", "gfx950", "rdna4", "triton"})

BUILTIN: tuple[KernelSpec, ...] = (
    KernelSpec("RmsNorm", params("x:T w:T eps:f64"), _rms, calibration_key="rms_norm",
               doc="y = cast(x32 * rsqrt(mean(x32^2) + eps), w.dtype) * w, in x.dtype (vLLM IR)"),
    KernelSpec("AddRmsNorm", params("x:T r:T w:T eps:f64"), _add_rms, calibration_key="add_rms_norm",
               doc="(RmsNorm of s32 = x32 + r32, cast(s32, x.dtype)); outputs (normed, residual_out)"),
    KernelSpec("QuantGroup", params("x:T G:i64 dt:dtype"), _quant_group, calibration_key="group_quant",
               doc="per-row groups of G: scale = max(amax, 1e-10) / finfo(dt).max, q = clamp(x / scale)"),
    KernelSpec(
        "K_rmsnorm_fp8_group_quant", params("x:T w:T eps:f64 G:i64 dt:dtype"), _rms_quant,
        outputs=(f"(Get {_RMS_Q} 0)", f"(Get {_RMS_Q} 1)"),
        constraints=_norm_quant_constraints("K_rmsnorm_fp8_group_quant"),
        dtypes=ACT_DTYPES, numerics="rounding", platforms=_GPU, calibration_key="rms_group_quant",
        doc="AITER fused_rms_fp8_group_quant: quantizes the fp32 norm output (no bf16 rounding)",
    ),
    KernelSpec(
        "K_rmsnorm_add_fp8_group_quant", params("x:T r:T w:T eps:f64 G:i64 dt:dtype"), _add_rms_quant,
        outputs=(f"(Get {_ADD_RMS_Q} 0)", f"(Get {_ADD_RMS} 1)", f"(Get {_ADD_RMS_Q} 1)"),
        constraints=(*_norm_quant_constraints("K_rmsnorm_add_fp8_group_quant"), "(= (shape x) (shape r))",
                     *same_dtype("x", "r")),
        dtypes=ACT_DTYPES, numerics="rounding", platforms=_GPU, calibration_key="add_rms_group_quant",
        doc="AITER fused_rms_fp8_group_quant with res1: outputs (q, residual_out, scale)",
    ),
)


@dataclass(frozen=True)
class Catalog:
    """An immutable table of :class:`KernelSpec` rows, addressed by constructor name."""

    specs: tuple[KernelSpec, ...]

    def __post_init__(self) -> None:
        names = [s.name for s in self.specs]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"catalog has duplicate entries: {sorted(dupes)}")

    def __iter__(self) -> Iterator[KernelSpec]:
        return iter(self.specs)

    def __getitem__(self, name: str) -> KernelSpec:
        for s in self.specs:
            if s.name == name:
                return s
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return any(s.name == name for s in self.specs)

    def extend(self, specs: Iterable[KernelSpec]) -> Catalog:
        return Catalog(self.specs + tuple(specs))

    def fused(self) -> tuple[KernelSpec, ...]:
        return tuple(s for s in self.specs if s.is_fused)

    def fingerprint(self) -> str:
        """A stable description of every row (for cache keys); formulas by their code."""
        rows = []
        for s in self.specs:
            code = getattr(s.traffic, "__code__", None)
            rows.append(repr((s.name, s.params, s.outputs, s.constraints, s.dtypes, s.numerics,
                              sorted(s.platforms), code.co_code.hex() if code else repr(s.traffic))))
        return "\n".join(rows)


DEFAULT_CATALOG = Catalog(BUILTIN)
