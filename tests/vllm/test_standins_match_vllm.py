"""eqsat's stand-ins for vLLM 0.33.0's ``vllm::`` ops against vLLM's own registrations.

vLLM registers its AITER ops only on ROCm; the registrations ``rocm_aiter_ops.register_ops_once()``
would make are recorded here (``direct_register_custom_op`` patched, nothing registered), as are
``rocm_unquantized_gemm`` and ``fla_rms_norm_gated`` from the two layer modules. Checked: the schema
strings are identical; vLLM's fakes and the stand-ins' registered fakes give the same output layouts
(or both raise) on 2-D, 3-D, column-slice, transposed and ragged (last dim not a multiple of the
group) inputs; a stand-in kernel raises wherever vLLM's fake does; and every graph of
``benchmarks.graphs.models`` gets the same kernels with vLLM's fakes registered onto the stand-in
ops as with the stand-ins' own.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed in this venv; `make test-vllm` builds "
                    ".venv-vllm with vllm==0.33.0 and runs these tests")

import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.library import infer_schema  # noqa: E402

from eqsat.core.spec import OpDef as StandIn  # noqa: E402
from eqsat.kernels.torch_ops import register_vllm_standins, vllm_standin_ops  # noqa: E402
from eqsat.library import define as library  # noqa: E402
from eqsat.library.vllm import standin_fp8_dtype  # noqa: E402

if "vllm_ir" in library._LIBS:
    pytest.skip("eqsat's vllm_ir stand-ins were registered before vLLM was imported, so vLLM cannot "
                "register its own ops in this process; `make test-vllm` runs `pytest -p vllm.ir tests/vllm`",
                allow_module_level=True)

import vllm._aiter_ops as aiter  # noqa: E402

import eqsat  # noqa: E402
from benchmarks.graphs import models  # noqa: E402

register_vllm_standins()
FP8 = standin_fp8_dtype()
assert FP8 is not None, "register_vllm_standins() defined no vllm:: quant stand-in"
BF16, F32 = torch.bfloat16, torch.float32
VLLM_OPS: dict[str, StandIn] = {op.name: op for op in vllm_standin_ops(FP8) if op.namespace == "vllm"}
IR_OPS: dict[str, StandIn] = {op.name: op for op in vllm_standin_ops(FP8) if op.namespace == "vllm_ir"}
# The two stand-ins vLLM registers outside _aiter_ops: the module and its (impl, fake) functions.
EXTRA = {"rocm_unquantized_gemm": ("vllm.model_executor.layers.utils", "rocm_unquantized_gemm_impl",
                                   "rocm_unquantized_gemm_fake"),
         "fla_rms_norm_gated": ("vllm.model_executor.layers.layernorm", "_fla_rms_norm_gated",
                                "_fla_rms_norm_gated_fake")}
AITER_FAKES = 33  # functions named *_fake in vllm/_aiter_ops.py (0.33.0)
AITER_REGISTRATIONS = 40  # direct_register_custom_op calls of register_ops_once() on a ROCm build


@dataclass(frozen=True)
class Registration:
    """One ``direct_register_custom_op`` call of vLLM's, recorded instead of made."""

    name: str
    func: Callable[..., Any]
    mutates_args: tuple[str, ...]
    fake: Callable[..., Any] | None
    module: str

    def schema(self) -> str:
        """The schema vLLM defines: ``op_name + infer_schema(op_func, mutates_args=...)``, normalized."""
        inferred = infer_schema(self.func, mutates_args=list(self.mutates_args))
        return str(torch._C.parse_schema(f"vllm::{self.name}{inferred}"))


def _registration(call: dict[str, Any], module: str) -> Registration:
    return Registration(call["op_name"], call["op_func"], tuple(call.get("mutates_args") or ()),
                        call.get("fake_impl"), module)


def aiter_calls() -> list[dict[str, Any]]:
    """Every registration ``rocm_aiter_ops.register_ops_once()`` makes on ROCm, as keyword arguments."""
    real = aiter.direct_register_custom_op
    calls: list[dict[str, Any]] = []

    def record(*args: Any, **kwargs: Any) -> None:
        calls.append(dict(inspect.signature(real).bind(*args, **kwargs).arguments))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(aiter, "direct_register_custom_op", record)
        mp.setattr(aiter, "is_aiter_found_and_supported", lambda: True)
        mp.setattr(aiter, "_OPS_REGISTERED", False)
        aiter.rocm_aiter_ops.register_ops_once()
    return calls


def extra_registrations() -> dict[str, Registration]:
    """vLLM's registrations of the ``EXTRA`` ops. Importing their modules registers them; the stand-ins
    already hold those names, so ``direct_register_custom_op`` is patched for the import: it records
    the ``EXTRA`` names (vllm library) and passes every other registration through. The modules keep
    the recorder they imported, so it passes everything through once the import is over."""
    import vllm.utils.torch_utils as torch_utils

    real = torch_utils.direct_register_custom_op
    signature = inspect.signature(real)
    recording = True
    calls: dict[str, dict[str, Any]] = {}

    @functools.wraps(real)
    def recorder(*args: Any, **kwargs: Any) -> Any:
        call = dict(signature.bind(*args, **kwargs).arguments)
        if recording and call["op_name"] in EXTRA and call.get("target_lib") is None:
            calls[call["op_name"]] = call
            return None
        return real(*args, **kwargs)

    found: dict[str, Registration] = {}
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(torch_utils, "direct_register_custom_op", recorder)
            for name, (module, impl, fake) in EXTRA.items():
                if module in sys.modules:  # imported before: its functions, registered with vLLM's defaults
                    mod = sys.modules[module]
                    found[name] = Registration(name, getattr(mod, impl), (), getattr(mod, fake), module)
                    continue
                importlib.import_module(module)
                assert name in calls, f"importing {module} registered no vllm::{name}"
                found[name] = _registration(calls[name], module)
    finally:
        recording = False
    return found


def assert_standins_in_place() -> None:
    """Each ``vllm::`` stand-in is eqsat's definition with eqsat's fake (nothing of vLLM's, or of this
    module's, shadows it)."""
    for name in VLLM_OPS:
        dump = torch._C._dispatch_dump(f"vllm::{name}")
        assert "eqsat/library/define.py" in dump and __file__ not in dump, dump
        kernel = torch._library.simple_registry.singleton.find(f"vllm::{name}").fake_impl.kernel
        assert kernel is not None and "eqsat/library/define.py" in kernel.source, (name, kernel)


@pytest.fixture(scope="module")
def registrations() -> Iterator[dict[str, Registration]]:
    """vLLM's registration of every name it registers, recorded; the stand-ins checked in place before
    and after."""
    assert_standins_in_place()
    found = {c["op_name"]: _registration(c, "vllm._aiter_ops") for c in aiter_calls()}
    found.update(extra_registrations())
    assert_standins_in_place()
    yield found
    assert_standins_in_place()


@pytest.fixture
def vllm_fp8(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's fakes read ``vllm._aiter_ops.FP8_DTYPE`` when called: the stand-ins' fp8 dtype."""
    monkeypatch.setattr(aiter, "FP8_DTYPE", FP8)


def registration(registrations: dict[str, Registration], name: str) -> Registration:
    assert name in registrations, f"vLLM registers no vllm::{name} (neither _aiter_ops nor {list(EXTRA)})"
    return registrations[name]


def overload(name: str) -> torch._ops.OpOverload:
    return getattr(torch.ops.vllm, name).default


# -- example inputs -------------------------------------------------------------------------------

LAYOUTS = ("2d", "3d", "slice", "transposed", "ragged")
TOKENS, HIDDEN, G, EPS, PAD = 8, 256, 128, 1e-6, 128
PAD_HIDDEN = 320  # padded to 384 by a multiple of 128
Q_LORA, KV_LORA, ROPE = 256, 128, 64  # the MLA q / kv split of a [M, 256 + 128 + 64] projection


def hidden(layout: str, n: int = HIDDEN) -> int:
    """``n``, or for the ``ragged`` layout ``n`` plus half a group (scale shapes round up or down)."""
    return n + G // 2 if layout == "ragged" else n


def act(layout: str, n: int | None = None, seed: int = 0) -> torch.Tensor:
    """A bf16 activation of last dim ``n`` (default ``hidden(layout)``): ``[M, n]`` (``2d``, ``ragged``),
    ``[2, M/2, n]``, the column slice ``p[:, :n]`` of a wider ``p`` (row stride ``n + 128``) or a dense
    transposed ``[n, M].t()`` (strides (1, M))."""
    n = hidden(layout) if n is None else n
    g = torch.Generator().manual_seed(seed * 1000 + n)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(BF16)

    if layout in ("2d", "ragged"):
        return randn(TOKENS, n)
    if layout == "3d":
        return randn(2, TOKENS // 2, n)
    if layout == "slice":
        return randn(TOKENS, n + G)[:, :n]
    if layout == "transposed":
        return randn(n, TOKENS).t()
    raise ValueError(layout)


def weight(n: int, rows: int | None = None) -> torch.Tensor:
    """A bf16 norm weight ``[n]``, or a GEMM weight ``[rows, n]``."""
    shape = (n,) if rows is None else (rows, n)
    return torch.randn(*shape, generator=torch.Generator().manual_seed(n)).to(BF16)


def scale() -> torch.Tensor:
    return torch.full((1, 1), 0.05, dtype=F32)


def _norm(lo: str) -> tuple[torch.Tensor, torch.Tensor]:
    return act(lo), weight(hidden(lo))


def _add_norm(lo: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return act(lo), act(lo, seed=1), weight(hidden(lo))


def _mla(lo: str) -> tuple[Any, ...]:
    """q, q_weight, kv, kv_weight, eps, eps: q and kv the split of one projection (views, the ``slice``
    layout) or separate tensors."""
    nq = hidden(lo, Q_LORA)
    if lo == "slice":
        q, kv, _ = act("2d", nq + KV_LORA + ROPE).split([nq, KV_LORA, ROPE], dim=-1)
    else:
        q, kv = act(lo, nq), act(lo, KV_LORA, seed=1)
    return q, weight(nq), kv, weight(KV_LORA), EPS, EPS


def _per_tensor(lo: str) -> tuple[Any, ...]:
    x = act(lo)
    return torch.empty(x.shape, dtype=FP8), x, scale(), False


CASES: dict[str, Callable[[str], tuple[Any, ...]]] = {
    "rocm_aiter_group_fp8_quant": lambda lo: (act(lo), G),
    "rocm_aiter_rmsnorm_fp8_group_quant": lambda lo: (*_norm(lo), EPS, G),
    "rocm_aiter_rmsnorm_with_add_fp8_group_quant": lambda lo: (*_add_norm(lo), EPS, G),
    "rocm_aiter_act_mul_and_fp8_group_quant": lambda lo: (act(lo, 2 * hidden(lo)), G),
    "fla_rms_norm_gated": lambda lo: (act(lo), act(lo, seed=1), weight(hidden(lo)), EPS, None, True, "silu"),
    "rocm_aiter_fused_rms_gated_fp8_group_quant":
        lambda lo: (*_norm(lo), None, act(lo, seed=1), EPS, True, "silu", G),
    "rocm_aiter_per_token_quant": lambda lo: (act(lo), FP8),
    "rocm_aiter_per_tensor_quant": _per_tensor,
    "rocm_aiter_rmsnorm_fused_dynamic_quant": lambda lo: (*_norm(lo), EPS, FP8),
    "rocm_aiter_rmsnorm_fused_add_dynamic_quant": lambda lo: (*_add_norm(lo), EPS, FP8),
    "rocm_aiter_fused_rms_fp8_per_tensor_static_quant": lambda lo: (*_norm(lo), EPS, scale(), FP8),
    "rocm_aiter_fused_add_rms_fp8_per_tensor_static_quant": lambda lo: (*_add_norm(lo), EPS, scale(), FP8),
    "fused_mla_dual_rms_norm": _mla,
    "fused_mla_dual_rms_norm_per_token_quant": _mla,
    "fused_mla_dual_rms_norm_group_quant": lambda lo: (*_mla(lo), G, False),
    "rocm_aiter_triton_add_rmsnorm_pad":
        lambda lo: (act(lo, PAD_HIDDEN), weight(PAD_HIDDEN), EPS, act(lo, PAD_HIDDEN, seed=1), PAD),
    "rocm_unquantized_gemm": lambda lo: (act(lo), weight(hidden(lo), rows=2 * HIDDEN), None),
}


def case(name: str, layout: str) -> tuple[Any, ...]:
    assert name in CASES, f"no example inputs for vllm::{name}: add a builder to CASES"
    return CASES[name](layout)


def layout_of(out: object) -> object:
    """Shapes, strides and dtypes of an op's outputs (``None`` for an op that returns nothing)."""
    if out is None:
        return None
    if isinstance(out, torch.Tensor):
        return (tuple(out.shape), tuple(out.stride()), out.dtype)
    return tuple(layout_of(o) for o in out)


def run(f: Callable[..., Any], args: tuple[Any, ...]) -> object:
    """``f(*args)``'s output layout, or the exception it raised."""
    try:
        return layout_of(f(*args))
    except Exception as exc:  # any exception: "raises" is what is compared
        return exc


def vllm_fake(reg: Registration) -> Callable[..., Any]:
    """vLLM's fake for the op; for an op vLLM gives none, the one FakeTensorMode generates (an op that
    only mutates its arguments and returns nothing)."""
    if reg.fake is not None:
        return reg.fake
    op = overload(reg.name)
    assert torch._library.utils.can_generate_trivial_fake_impl(op), f"vLLM gives vllm::{reg.name} no fake"
    return functools.partial(torch._library.utils.generate_trivial_fake_impl, op)


def fake_outcomes(reg: Registration, layout: str) -> tuple[object, object]:
    """(vLLM's fake, the stand-in's registered fake) on fake copies of the example inputs."""
    mode = FakeTensorMode()
    args = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in case(reg.name, layout))
    with mode:
        return run(vllm_fake(reg), args), run(overload(reg.name), args)


# -- the checks -----------------------------------------------------------------------------------


def test_aiter_ops_module_holds_the_fakes(registrations: dict[str, Registration]) -> None:
    fakes = {n for n, v in vars(aiter).items() if n.endswith("_fake") and inspect.isfunction(v)}
    assert len(fakes) == AITER_FAKES, sorted(fakes)
    calls = aiter_calls()
    assert len(calls) == AITER_REGISTRATIONS, [c["op_name"] for c in calls]
    mirrored = {name: reg for name, reg in registrations.items()
                if name in VLLM_OPS and reg.module == "vllm._aiter_ops"}
    assert set(mirrored) == set(VLLM_OPS) - set(EXTRA)
    assert {name for name, reg in mirrored.items() if reg.fake is None} == {"rocm_aiter_per_tensor_quant"}
    mirrored_fakes = {reg.fake.__name__ for reg in mirrored.values() if reg.fake is not None}
    assert mirrored_fakes <= fakes, sorted(mirrored_fakes - fakes)


def test_every_standin_has_example_inputs(registrations: dict[str, Registration]) -> None:
    faked = {name for name in VLLM_OPS if registration(registrations, name).fake is not None}
    missing = sorted(faked - set(CASES))
    assert not missing, f"stand-ins with a vLLM fake but no builder in CASES: {missing}"
    assert set(CASES) <= set(VLLM_OPS), f"builders for no stand-in: {sorted(set(CASES) - set(VLLM_OPS))}"


@pytest.mark.parametrize("name", sorted(VLLM_OPS))
def test_schema_is_vllms(registrations: dict[str, Registration], name: str) -> None:
    reg = registration(registrations, name)
    assert reg.schema() == str(overload(name)._schema)
    assert str(torch._C.parse_schema(f"vllm::{VLLM_OPS[name].schema}")) == reg.schema()


@pytest.mark.parametrize("name", sorted(IR_OPS))
def test_vllm_ir_schema_is_vllms(name: str) -> None:
    """The ``vllm_ir`` stand-ins are not registered here (vLLM's own ops are); their schemas are its."""
    assert str(torch._C.parse_schema(f"vllm_ir::{IR_OPS[name].schema}")) == str(
        getattr(torch.ops.vllm_ir, name).default._schema)


@pytest.mark.usefixtures("vllm_fp8")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", sorted(VLLM_OPS))
def test_fake_is_vllms(registrations: dict[str, Registration], name: str, layout: str) -> None:
    want, got = fake_outcomes(registration(registrations, name), layout)
    if isinstance(want, Exception) or isinstance(got, Exception):
        assert isinstance(want, Exception) and isinstance(got, Exception), (
            f"vLLM's fake: {want!r}; the stand-in's: {got!r}")
    else:
        assert got == want


@pytest.mark.usefixtures("vllm_fp8")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", sorted(VLLM_OPS))
def test_kernel_no_more_permissive_than_vllms_fake(registrations: dict[str, Registration], name: str,
                                                   layout: str) -> None:
    """Where vLLM's fake raises, the stand-in kernel raises on real tensors; where the kernel runs, its
    outputs have vLLM's fake's layout."""
    want, _ = fake_outcomes(registration(registrations, name), layout)
    got = run(overload(name), case(name, layout))
    if isinstance(want, Exception):
        assert isinstance(got, Exception), f"vLLM's fake raises {want!r}, the stand-in kernel returns {got}"
    elif not isinstance(got, Exception):
        assert got == want


@contextlib.contextmanager
def vllm_fakes(registrations: dict[str, Registration], calls: Counter[str]) -> Iterator[None]:
    """vLLM's fakes (counting their calls) registered onto the stand-in ops, over the stand-ins' own;
    an op vLLM gives no fake keeps the stand-in's (it returns nothing, as FakeTensorMode's trivial fake
    would). Destroying the library unregisters them: each stand-in's fake is the newest again."""
    lib = torch.library.Library("vllm", "FRAGMENT")

    def counted(name: str, fake: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fake)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fake(*args, **kwargs)

        return wrapper

    try:
        for name in VLLM_OPS:
            fake = registration(registrations, name).fake
            if fake is not None:
                torch.library.register_fake(f"vllm::{name}", counted(name, fake), lib=lib,
                                            allow_override=True)
        yield
    finally:
        lib._destroy()


COSTED = {"gpt-oss router + pad": ("h200", 8)}
"""Graphs costed otherwise than on mi300x at 256 tokens: gpt-oss's router GEMM copies the pad kernel's strided
slice, which on mi300x's uncalibrated lines costs what the kernel saves; on the H200's it still wins at M = 8
(from 256 the copy's slow config in a graph compiled for every size costs what the kernel saves)."""


def chosen(build: Callable[[], torch.fx.GraphModule], profile: str = "mi300x",
           sizes: int = 256) -> tuple[dict[str, int], set[str]]:
    """The kernels ``eqsat.optimize`` chooses in the graph ``build`` captures, and the ``vllm::`` stand-ins
    the rewritten graph (which must lint) calls."""
    gm = build()
    report = eqsat.optimize(gm, profile=profile, sizes=sizes, strict=True)
    gm.graph.lint()
    called = {n.target._schema.name.removeprefix("vllm::") for n in gm.graph.nodes
              if isinstance(n.target, torch._ops.OpOverload) and n.target.namespace == "vllm"}
    return dict(report.kernels_chosen), called & set(VLLM_OPS)


@pytest.mark.usefixtures("vllm_fp8")
@pytest.mark.parametrize("graph", list(models.GRAPHS))
def test_graph_chooses_the_same_kernels_with_vllms_fakes(registrations: dict[str, Registration],
                                                         graph: str) -> None:
    """Captured and rewritten with vLLM's fakes: the same kernels as with the stand-ins' own (at least
    one fusion), and vLLM's fake ran for each faked stand-in the rewritten graph calls."""
    costed = COSTED.get(graph, ("mi300x", 256))
    own, _ = chosen(models.GRAPHS[graph], *costed)
    calls: Counter[str] = Counter()
    with vllm_fakes(registrations, calls):
        theirs, called = chosen(models.GRAPHS[graph], *costed)
    assert_standins_in_place()
    assert theirs == own
    assert sum(own.values()) >= 1, own
    faked = {name for name in called if registrations[name].fake is not None}
    assert faked and faked <= set(calls), (sorted(faked), dict(calls))


def _fused_sites(gm: torch.fx.GraphModule) -> Counter[str]:
    """The fused vLLM ops a graph calls, by name."""
    return Counter(n.target._schema.name.removeprefix("vllm::") for n in gm.graph.nodes
                   if isinstance(n.target, torch._ops.OpOverload) and n.target.namespace == "vllm"
                   and n.target._schema.name.removeprefix("vllm::") in FUSED_OPS)


FUSED_OPS = {"rocm_aiter_rmsnorm_with_add_fp8_group_quant", "rocm_aiter_rmsnorm_fp8_group_quant",
             "fused_mla_dual_rms_norm_group_quant", "rocm_aiter_act_mul_and_fp8_group_quant"}


@pytest.mark.usefixtures("vllm_fp8")
def test_deepseek_stacks_get_every_fusion_a_vllm_style_pass_finds(registrations: dict[str, Registration]) -> None:
    """With vLLM's fakes: a 16-layer DeepSeek-V3 stack gets every fusion of the pattern-matcher pass
    written as vLLM 0.33.0 writes its own (``benchmarks.baseline``), and it gets them on the 3-D
    DeepSeek-V3.2 indexer, where that pass's replacement meets vLLM's 2-D fake and raises."""
    from benchmarks.baseline.pattern_matcher import PatternMatcherBaseline
    from eqsat.fx.capture import copy_graph

    calls: Counter[str] = Counter()
    baseline = PatternMatcherBaseline()
    with vllm_fakes(registrations, calls):
        gm = models.deepseek_v3(16)
        theirs, ours = copy_graph(gm), copy_graph(gm)
        assert baseline.apply(theirs) == 80
        report = eqsat.optimize(ours, profile="mi300x", sizes=256, strict=True)
        assert _fused_sites(ours) == _fused_sites(theirs) and sum(report.kernels_chosen.values()) == 64
        indexer = models.deepseek_v32_indexer_3d()
        with pytest.raises(ValueError, match="too many values to unpack"):
            baseline.apply(copy_graph(indexer))
        assert eqsat.optimize(indexer, profile="mi300x", sizes=256, strict=True).kernels_chosen == {
            "K_rmsnorm_fp8_group_quant": 1}
    assert_standins_in_place()
