"""Shape-aware choice: the token dim bound to a size, a list of sizes, or vLLM's compile range.

On the H200 profile (fitted on measured kernels) the fused AITER silu_mul + quant kernel wins at
decode sizes, and at prefill sizes Inductor's code for the native chain where its quant is the graph's
output, or, where a GEMM reads the quant (Inductor then writes it as a kernel of its own that reads the
chain's input again), the two kernels of ``silu_and_mul`` and AITER's group quant (the quant streams at
5.6 TB/s), so one graph is extracted differently per range and per reader.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

import eqsat
from eqsat.pass_ import range_sizes
from tests.conftest import rand, scaled_gemm, trace

own = torch.ops.eqsat
FN = torch.float8_e4m3fn


def silu_quant(x):
    return own.group_fp8_quant(own.silu_and_mul(x), 128, FN)


def silu_quant_gemm(x):
    return scaled_gemm(*silu_quant(x))


@dataclass
class Range:  # vLLM's config.utils.Range: inclusive start and end
    start: int
    end: int


def chosen(report: eqsat.Report) -> set[str]:
    return set(report.kernels_chosen)


@pytest.mark.parametrize(("sizes", "kernels", "into_gemm"), [
    (8, {"K_silu_mul_fp8_group_quant"}, {"K_silu_mul_fp8_group_quant"}),
    (4096, {"I_silu_group_quant"}, set()),
    ((1, 2, 4, 8, 16), {"K_silu_mul_fp8_group_quant"}, {"K_silu_mul_fp8_group_quant"}),
    ((1024, 2048, 4096, 8192), {"I_silu_group_quant"}, set())])
def test_choice_follows_the_bound_sizes_and_the_quants_reader(sizes, kernels, into_gemm):
    report = eqsat.optimize(trace(silu_quant, rand(8, 2 * 7168)), profile="h200", sizes=sizes, strict=True)
    assert chosen(report) == kernels
    report = eqsat.optimize(trace(silu_quant_gemm, rand(8, 2 * 7168)), profile="h200", sizes=sizes, strict=True)
    assert chosen(report) == into_gemm, report.table()


def test_pass_costs_each_compile_range_separately():
    p = eqsat.EqSatPass(profile="h200", strict=True)
    decode, prefill = trace(silu_quant_gemm, rand(8, 2 * 7168)), trace(silu_quant_gemm, rand(8, 2 * 7168))
    assert p.is_applicable_for_range(Range(1, 64))
    p(decode.graph)
    assert chosen(p.last_report) == {"K_silu_mul_fp8_group_quant"}
    assert p.is_applicable_for_range(Range(1025, 8192))
    p(prefill.graph)
    assert chosen(p.last_report) == set() and not p.last_report.changed
    decode.recompile(), prefill.recompile()  # as Inductor does after its post-grad passes
    assert "silu_mul_fp8_group_quant" in decode.code and "silu_mul_fp8_group_quant" not in prefill.code


def test_range_sizes_sample_the_range():
    small = range_sizes(Range(1, 64))
    assert small[0] == 1 and small[-1] == 64 and len(small) <= 6 and set(small) <= {1, 2, 4, 8, 16, 32, 64}
    assert range_sizes(Range(256, 256)) == (256,)
    sizes = range_sizes(Range(1025, 8192))
    assert sizes[0] == 1025 and sizes[-1] == 8192 and len(sizes) <= 6 and list(sizes) == sorted(sizes)


def test_ilp_extractor_agrees_with_greedy_end_to_end():
    for sizes in (8, 4096):
        g, i = trace(silu_quant, rand(8, 1024)), trace(silu_quant, rand(8, 1024))
        rg = eqsat.optimize(g, profile="h200", sizes=sizes, strict=True)
        ri = eqsat.optimize(i, profile="h200", sizes=sizes, extractor="ilp", strict=True)
        assert ri.predicted_after_us <= rg.predicted_after_us + 1e-9
        assert chosen(ri) == chosen(rg)


def test_a_range_weighs_each_size_by_its_ratio_not_its_microseconds():
    """Five decode sizes and one prefill size: Inductor's chain saves 44 µs at 8192 (half its time there),
    the fused kernel 0.2-0.7 µs at each decode size (13-30% each). By µs the range is 8192's; by ratio the
    fused kernel wins five sizes of six, and the extraction is its. One graph runs at every size of the
    range, so a rewrite slower at 8192 is not written: the graph is left alone and the report says where;
    over the decode sizes alone the kernel is written."""
    g = lambda: trace(silu_quant, rand(8, 2 * 7168))  # noqa: E731
    decode_and_prefill = (1, 2, 4, 8, 16, 8192)
    weighed = eqsat.optimize(g(), profile="h200", sizes=decode_and_prefill, strict=True, emit="always")
    assert chosen(weighed) == {"K_silu_mul_fp8_group_quant"}
    report = eqsat.optimize(g(), profile="h200", sizes=decode_and_prefill, strict=True)
    assert not report.changed and report.declined.startswith("predicted slower at size 8192 "), report.summary()
    assert chosen(eqsat.optimize(g(), profile="h200", sizes=(1, 2, 4, 8, 16), strict=True)) == \
        {"K_silu_mul_fp8_group_quant"}


def test_the_report_predicts_each_size_for_the_graph_written():
    """``Report.predicted_at``: per size of the range, the predicted µs before and after for the one graph
    written: the kernel's saving at each decode size where it is written; after = before at every size where
    the graph is left alone (at 8192 the kernel would lose, so it is not written, and no size gains);
    with ``emit="always"`` the written kernel's loss at 8192 shows."""
    g = lambda: trace(silu_quant, rand(8, 2 * 7168))  # noqa: E731
    decode = eqsat.optimize(g(), profile="h200", sizes=(1, 2, 4, 8, 16), strict=True)
    assert decode.changed and sorted(decode.predicted_at) == [1, 2, 4, 8, 16]
    assert all(after < before for before, after in decode.predicted_at.values())
    left = eqsat.optimize(g(), profile="h200", sizes=(1, 2, 4, 8, 16, 8192), strict=True)
    assert not left.changed and all(a == b for b, a in left.predicted_at.values())
    forced = eqsat.optimize(g(), profile="h200", sizes=(1, 2, 4, 8, 16, 8192), strict=True, emit="always")
    assert forced.predicted_at[8192][1] > forced.predicted_at[8192][0]
    assert all(a < b for m, (b, a) in forced.predicted_at.items() if m != 8192)
    assert forced.predicted_at[1] == pytest.approx(decode.predicted_at[1])  # a size's cost is the size's own
    one = eqsat.optimize(g(), profile="h200", sizes=8, strict=True)
    assert one.predicted_at == {8: (pytest.approx(one.predicted_before_us), pytest.approx(one.predicted_after_us))}


def test_weights_are_the_inverse_of_the_unchanged_graphs_time():
    from eqsat.cost.roofline import RooflineCost, load_profile
    from eqsat.kernels.catalog import DEFAULT_CATALOG

    cost = RooflineCost(None, DEFAULT_CATALOG, load_profile("h200"), (1, 8192))  # type: ignore[arg-type]
    assert cost.weights == (0.5, 0.5)
    cost.weigh([10.0, 1000.0])
    assert cost.weights == pytest.approx((100 / 101, 1 / 101))
    cost.weigh([0.0, 5.0])  # nothing to weigh by: equal weights
    assert cost.weights == (0.5, 0.5)
    with pytest.raises(ValueError, match="2 size points"):
        cost.weigh([1.0])
