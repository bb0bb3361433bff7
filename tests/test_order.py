"""Order never matters: every shuffle of the rule list gives the same extracted graph, and a graph
that is already partly fused ends where the unfused one does."""

from __future__ import annotations

import random

import pytest
import torch

import eqsat
from benchmarks.graphs import adversarial as adv
from eqsat.tools import demo
from tests.conftest import rand, targets, trace
from tests.test_gated import before as gated_before
from tests.test_gated import inputs as gated_inputs

vllm, vir, own = torch.ops.vllm, torch.ops.vllm_ir, torch.ops.eqsat


def native_rms_quant(x, w):
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)
    return vllm.rocm_aiter_group_fp8_quant(y.to(w.dtype) * w, 128)


def layer(x, r, w, v):
    n, res = vir.fused_add_rms_norm(x, r, w, 1e-6)
    q, s = vllm.rocm_aiter_group_fp8_quant(n.view(-1, 512), 128)
    h = vir.rms_norm(v, w, 1e-5)
    q2, s2 = vllm.rocm_aiter_group_fp8_quant(h, 128)
    q3, s3 = vllm.rocm_aiter_group_fp8_quant(h, 128)
    a = own.silu_and_mul(torch.cat([x, v], -1))
    return q, s, res, q2, s2, q3, s3, own.group_fp8_quant(a, 128, torch.float8_e4m3fnuz)


MODEL = demo.DecoderLayerNormQuant()
GRAPHS = {
    "layer": lambda: trace(layer, rand(8, 512), rand(8, 512, seed=1), rand(512), rand(8, 512, seed=2)),
    "native": lambda: trace(native_rms_quant, rand(8, 512), rand(512)),
    "fan_out": lambda: adv.fan_out(8),
    "reshapes": lambda: adv.reshape_chain(12),
    "gated": lambda: trace(gated_before("3d", "native", "native"), *gated_inputs()),
    "demo": lambda: trace(lambda x, r, v: MODEL(x, r, v), rand(8, 512), rand(8, 512, seed=1), rand(8, 512, seed=2)),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_shuffled_rule_orders_extract_the_same_graph(name):
    rules = eqsat.Options().active_rules()
    baseline = GRAPHS[name]()
    assert eqsat.optimize(baseline, strict=True, emit="always").kernels_chosen  # something to agree on
    orders = [tuple(reversed(rules))] + [tuple(random.Random(seed).sample(rules, len(rules))) for seed in range(3)]
    for order in orders:
        gm = GRAPHS[name]()
        eqsat.optimize(gm, strict=True, emit="always", rules=order)
        assert gm.code == baseline.code


def test_partly_fused_input_ends_where_unfused_input_does():
    def unfused(x, r, w):
        n, res = vir.fused_add_rms_norm(x, r, w, 1e-6)
        q, s = vllm.rocm_aiter_group_fp8_quant(n, 128)
        q2, s2 = vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128)
        return q, s, res, q2, s2

    def partly(x, r, w):
        q, res, s = vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant(x, r, w, 1e-6, 128)
        q2, s2 = vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128)
        return q, s, res, q2, s2

    inputs = (rand(8, 512), rand(8, 512, seed=1), rand(512))
    a, b = trace(unfused, *inputs), trace(partly, *inputs)
    eqsat.optimize(a, strict=True)
    eqsat.optimize(b, strict=True)
    assert targets(a) == targets(b)
    assert all("rmsnorm" in t for t in targets(a))


def test_rules_of_a_catalog_that_cannot_be_hashed_are_built_all_the_same():
    """default_rules memoises per (catalog, numerics); a user's row holding a list makes the catalog
    unhashable, and its rules are then built each time rather than failing."""
    import dataclasses

    from eqsat.rewrites.schedule import default_rules

    from eqsat.kernels.catalog import DEFAULT_CATALOG

    row = DEFAULT_CATALOG["K_rmsnorm_fp8_group_quant"]
    odd = DEFAULT_CATALOG.extend([dataclasses.replace(row, name="K_listy", constraints=list(row.constraints))])
    names = {r.name for r in default_rules(odd, "rounding")}
    assert {"fuse-K_listy", "fuse-K_rmsnorm_fp8_group_quant"} <= names
    assert default_rules(DEFAULT_CATALOG, "rounding") is default_rules(DEFAULT_CATALOG, "rounding")
