"""The twin over heads (``eqsat.kernels.inductor``): Qwen3-Next's gated norm + group quant, whose rows are
the flat (tokens x H, D) view of (tokens, H x D), written over the (tokens, H, D) view in a dynamic graph
where a measured profile prices Inductor's one kernel there below its two over the flat rows. The shipped
h200 profile has both forms' lines, fitted from the committed table (docs/gpu.md); ``FLAT_ONLY`` is it
without the ``@heads`` lines."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import eqsat
from eqsat.cost.calibrate import fit, read_table
from eqsat.cost.roofline import load_profile
from eqsat.kernels.inductor import HEADS_KEY, OverHeads, heads_of
from eqsat.library import reference as ref
from eqsat.library.reference import fp8_step_error
from tests.conftest import rand, trace
from tests.test_lift import quant_native

FN = torch.float8_e4m3fn
H, D = 4, 128
SIZES = (1, 8, 64, 256, 1024, 4096, 8192)
IH = "IH_rms_gated_group_quant"
TESTED_RULES = {f"fuse-{IH}"}
TABLE = "benchmarks/results/h200_calibration_heads.csv"
HEADS = load_profile("h200")
FLAT_ONLY = replace(HEADS, kernels={k: v for k, v in HEADS.kernels.items() if HEADS_KEY not in k})


def test_the_shipped_heads_lines_are_the_tables():
    """The h200 profile's ``@heads`` lines are what ``eqsat calibrate`` fits on the committed table."""
    fitted = fit([m for m in read_table(TABLE) if all(HEADS_KEY in c.key for c in m.components)], FLAT_ONLY)
    heads = {k for k in fitted.kernels if HEADS_KEY in k}
    assert heads == {f"inductor:rms_gated_group_quant{HEADS_KEY}", f"inductor:rms_gated_group_quant{HEADS_KEY}@dynamic"}
    for k in heads:
        got, want = HEADS.kernels[k], fitted.kernels[k]
        assert got.launch_us == pytest.approx(want.launch_us) and got.bandwidth_gbps == pytest.approx(want.bandwidth_gbps)


def qwen_chain(core: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``RMSNormGated.forward_native`` over the heads' flat rows, then its native group quant over
    the token's row (``e2e_blocks.Qwen3NextGatedOut``), silu as Inductor decomposes it."""
    m = core.shape[0]
    x32 = core.reshape(-1, D).float()
    z32 = z.reshape(-1, D).float()
    out = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    y = (out * (z32 / (1 + torch.exp(-z32)))).to(core.dtype)
    return quant_native(y.reshape(m, H * D), 128, 448.0, fp8=FN)


def inputs(m: int) -> list[torch.Tensor]:
    return [rand(m, H * D), rand(m, H * D, seed=1), rand(D, seed=2)]


def norm_inputs_rank(gm: torch.fx.GraphModule) -> set[int]:
    """The ranks of the values the graph squares (the norm's fp32 input)."""
    return {n.args[0].meta["val"].dim() for n in gm.graph.nodes if n.target is torch.ops.aten.pow.Tensor_Scalar}


def test_heads_of_reads_a_static_factor_of_a_symbolic_dim():
    assert heads_of("32*s77") == 32 and heads_of("4*s0") == 4
    assert heads_of("s77") is None and heads_of(256) is None and heads_of("2*s0 + 1") is None


@pytest.mark.parametrize(("tokens", "heads", "d", "g"), [(3, 2, 128, 128), (5, 4, 256, 128), (1, 8, 64, 32)])
def test_over_heads_is_the_flat_composition(tokens, heads, d, g):
    """Viewing the rows as (tokens, H, D) changes no value: bit-exact against the flat composition."""
    x, z, w = rand(tokens * heads, d), rand(tokens * heads, d, seed=1), rand(d, seed=2)
    twin = next(r for r in eqsat.DEFAULT_CATALOG if r.name == IH).expand
    assert isinstance(twin, OverHeads)
    q, s = replace(twin, heads=heads)(x, z, w, 1e-6, g, FN)
    q0, s0 = ref.group_fp8_quant(ref.rms_norm_gated(x, z, w, 1e-6), g, FN)
    assert q.shape == q0.shape and s.shape == s0.shape
    assert torch.equal(q.float(), q0.float()) and torch.equal(s, s0)
    with pytest.raises(ValueError, match="heads >= 2"):
        twin(x, z, w, 1e-6, g, FN)


def test_dynamic_chain_written_over_heads():
    """Traced with a symbolic token dim first run at 8192 (vLLM's profile run): with the measured lines
    the chain over heads is one kernel, so the pass writes it over (tokens, H, D) views, within the
    rounding contract of the quant; its outputs reach their readers with no flat view between. The before is priced as Inductor's two kernels
    of the flat chain (about 1.6x the one), not as its twenty ATen ops one kernel each (about 15x)."""
    gm = trace(qwen_chain, *inputs(8192))
    assert norm_inputs_rank(gm) == {2}
    report = eqsat.optimize(gm, profile=HEADS, sizes=SIZES, strict=True)
    assert report.kernels_chosen == {IH: 1}, report.summary()
    assert report.predicted_after_us < report.predicted_before_us < 3 * report.predicted_after_us
    assert norm_inputs_rank(gm) == {3}
    q_out = next(n for n in gm.graph.nodes if n.target is torch.ops.prims.convert_element_type.default
                 and n.args[1] == FN)
    assert all(u.target is torch.ops.aten.reshape.default and u.args[1][-1] == H * D for u in q_out.users)
    for m in (8, 64):
        args = inputs(m)
        q, s = gm(*args)
        assert fp8_step_error(q, s, *qwen_chain(*args), 128) <= 1.25


def test_no_candidate_on_static_rows():
    """A graph of one size has no token dim to view the heads by: the chain is left as it is."""
    gm = torch.fx.experimental.proxy_tensor.make_fx(qwen_chain, tracing_mode="fake")(*inputs(64))
    report = eqsat.optimize(gm, profile=HEADS, sizes=64, strict=True)
    assert IH not in report.kernels_chosen and norm_inputs_rank(gm) == {2}


def test_no_candidate_without_a_measured_line():
    """Only a measurement says the re-viewed chain is the faster: without a ``@heads`` line the dynamic
    chain is left alone."""
    gm = trace(qwen_chain, *inputs(8192))
    report = eqsat.optimize(gm, profile=FLAT_ONLY, sizes=SIZES, strict=True)
    assert IH not in report.kernels_chosen and norm_inputs_rank(gm) == {2}
    assert not report.changed


def test_inside_torch_compile_one_dynamic_graph():
    """Inside ``torch.compile`` (Inductor on the CPU), one graph for every M, first run at 8192: the pass
    writes the chain over heads, and the compiled model at other sizes stays within the quant's contract."""
    p = eqsat.EqSatPass(profile=HEADS, sizes=SIZES, strict=True)
    compiled = torch.compile(qwen_chain, dynamic=None)
    first = inputs(8192)
    for t in first[:2]:
        torch._dynamo.mark_dynamic(t, 0)
    torch._dynamo.reset()
    with torch._inductor.config.patch(post_grad_custom_post_pass=p, fx_graph_cache=False):
        compiled(*first)
        assert p.last_report is not None and p.last_report.kernels_chosen == {IH: 1}, p.last_report
        for m in (3, 64):
            args = inputs(m)
            q, s = compiled(*args)
            assert fp8_step_error(q, s, *qwen_chain(*args), 128) <= 1.25


def qwen_over_heads(core: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What the pass writes for ``qwen_chain``: the references over the (tokens, H, D) views of the flat rows,
    the quant's groups the token row's, q and the scale reshaped from there to what the graph returns."""
    x3 = core.reshape(-1, D).reshape(-1, H, D)
    z3 = z.reshape(-1, D).reshape(-1, H, D)
    y32 = ref.rms_norm_gated(x3, z3, w, 1e-6).float()
    groups = y32.reshape(y32.shape[0], -1, 128)
    scale = groups.abs().amax(dim=-1, keepdim=True).clamp_min(ref.AMAX_FLOOR) / 448.0
    q = (groups * (1.0 / scale)).clamp(-448.0, 448.0).to(FN)
    return q.reshape(core.shape[0], H * D), scale.reshape(-1, H)


def test_fuse_over_heads_before_equals_after():
    """Before ≡ after, targets and arguments (``test_rules.check``), and both sides' values on fresh inputs
    of another token count within the quant's rounding."""
    from tests.test_rules import check

    check(qwen_chain, qwen_over_heads, inputs(8192), numerics="rounding", fires=f"fuse-{IH}", post_grad=True,
          profile=HEADS, sizes=SIZES)


def test_a_second_compile_reuses_the_trace_and_writes_the_same_graph():
    """A process compiling the model again (a new graph, fake mode and shape environment) writes the chain
    over heads from the trace the first compile made (``eqsat.fx.traces``): the same code, the same values."""
    p = eqsat.EqSatPass(profile=HEADS, sizes=SIZES, strict=True)
    first, second = trace(qwen_chain, *inputs(8192)), trace(qwen_chain, *inputs(8192))
    p(first.graph)
    p(second.graph)
    assert p.last_report is not None and p.last_report.kernels_chosen == {IH: 1}
    traces = p.engine.traces
    assert (traces.made, traces.remade) == (1, 1)
    first.recompile()
    second.recompile()
    assert first.code == second.code

    def layouts(gm: torch.fx.GraphModule) -> list:
        return [(tuple(map(str, v.shape)), tuple(map(str, v.stride())), v.dtype) if isinstance(v, torch.Tensor) else str(v)
                for v in (n.meta.get("val") for n in gm.graph.nodes)]

    assert layouts(first) == layouts(second)
    modes = {v.fake_mode for n in second.graph.nodes if isinstance(v := n.meta.get("val"), torch._subclasses.FakeTensor)}
    assert len(modes) == 1  # every value the second graph holds is of its own fake mode
