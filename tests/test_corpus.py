"""The CI part of the third-party corpus (``tests/fixtures/corpus``): each positive fuses into its
kernel within the rounding contract, each look-alike stays bit-exact (``benchmarks.corpus_check``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.corpus_check import check_case, compare

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
CASES = json.loads((CORPUS / "cases.json").read_text())


@pytest.mark.parametrize("stem", sorted(CASES))
def test_corpus_case(stem):
    outcome = check_case(CORPUS, stem, CASES[stem])
    assert outcome.passed, outcome.detail


def test_the_ci_part_holds_positives_and_look_alikes_of_both_fp8_dtypes():
    kinds = {(meta["fp8"], meta["kernel"] is None) for meta in CASES.values()}
    assert kinds == {(fp8, look) for fp8 in ("e4m3fn", "e4m3fnuz") for look in (False, True)}


def test_a_look_alike_check_sees_one_flipped_byte():
    import torch

    q = torch.zeros(2, 128, dtype=torch.float8_e4m3fn)
    flipped = q.clone()
    flipped.view(torch.uint8)[0, 0] = 1
    assert compare([q], [q], exact=True) == "" and compare([flipped], [q], exact=True) == "output 0 differs"


# -- the research loop on a region no kernel covers: discover it, then price a kernel for it --------------

def _gemma_traffic(a):
    from eqsat.core.spec import Traffic
    from eqsat.kernels.traffic import operand

    x, g = operand(a, "x"), a["G"]
    return Traffic(x.bytes + operand(a, "w").bytes, x.numel + x.rows * (x.shape[-1] // g) * 4)


def _gemma_kernel():
    from eqsat.core.spec import KernelSpec, params

    q = "(QuantGroup (RmsNormOnePlus x w eps) G dt)"  # Gemma's norm, its own semantic op
    return KernelSpec("K_what_if_gemma_rms_fp8_group_quant", params("x:T w:T eps:f64 G:i64 dt:dtype"), _gemma_traffic,
                      outputs=(f"(Get {q} 0)", f"(Get {q} 1)"), numerics="rounding")


def test_discover_then_what_if_shows_every_place_a_gemma_kernel_applies():
    """Gemma3's (1 + w) norm + vLLM's native quant: discover reports it as one chain; a what-if row
    for a kernel of that semantics is then chosen at that site, and at both of a graph holding two."""
    import torch

    from eqsat.fx.capture import copy_graph
    from eqsat.graphfile import load
    from eqsat.options import Options
    from eqsat.tools.explain import discover, explain

    gm = load(CORPUS / "gemma3-norm-group-quant.inductor.e4m3fn.json")
    (chain,) = discover(gm)
    assert set(chain.ops) == {"RmsNormOnePlus", "QuantGroup"} and chain.saving_us > 0
    assert any("modeling_gemma3.py" in line for line in chain.source)  # the HF source lines it came from
    options = Options(catalog=Options().catalog.extend([_gemma_kernel()]))
    sites = [s for s in explain(gm, options) if s.kernel == "K_what_if_gemma_rms_fp8_group_quant"]
    assert len(sites) == 1 and sites[0].status == "chosen" and sites[0].kernel_us < chain.cost_us

    def norm(x, w):
        o = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        return (o * (1.0 + w.float())).type_as(x)

    def quant(y):
        yg = y.view(-1, y.shape[-1] // 128, 128)
        s = (yg.abs().max(dim=-1, keepdim=True)[0].float() / 448.0).clamp_min(1 / (448.0 * 512))
        return (yg / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(y.shape), s.squeeze(-1)

    def two_layers(x, r, w1, w2):
        return (*quant(norm(x, w1)), *quant(norm(x + r, w2)))

    graphs = []
    x, w = torch.randn(8, 512).bfloat16(), torch.randn(512).bfloat16()
    torch._dynamo.reset()
    with torch._inductor.config.patch(post_grad_custom_post_pass=lambda g: graphs.append(copy_graph(g)),
                                      fx_graph_cache=False):
        torch.compile(two_layers, dynamic=False)(x, x, w, w)
    sites = [s for s in explain(graphs[-1], options) if s.kernel == "K_what_if_gemma_rms_fp8_group_quant"]
    assert [s.status for s in sites] == ["chosen", "chosen"]
