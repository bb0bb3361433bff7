"""Gemma's RMSNorm as its own semantic op (``eqsat/kernels/families/gemma_norm.py``): the lift rule
before ≡ after, the op's reference against the native chain, and that it is never ``RmsNorm``."""

from __future__ import annotations

import torch

import eqsat
from eqsat.kernels.families.gemma_norm import rms_norm_one_plus
from tests.conftest import rand, trace
from tests.test_rules import check

own = torch.ops.eqsat
TESTED_RULES = {"lift-gemma-norm"}
XW = [rand(8, 512), rand(512, seed=1)]


def gemma_native(x, w, eps=1e-6):
    """Gemma's ``_norm(x.float()) * (1.0 + self.weight.float())``, then ``type_as(x)``."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())).to(x.dtype)


def test_lift():
    check(lambda x, w: gemma_native(x, w), lambda x, w: own.rms_norm_one_plus(x, w, 1e-6), XW, fires="lift-gemma-norm",
          standalone_lifts=True)


def test_the_reference_is_the_native_chain_bitwise():
    for magnitude in (1e-3, 1.0, 50.0):
        x = rand(33, 512, seed=4) * magnitude
        assert torch.equal(rms_norm_one_plus(x, XW[1], 1e-6), gemma_native(x, XW[1]))


def test_never_rms_norm():
    gm = trace(lambda x, w: gemma_native(x, w), *XW)
    report = eqsat.optimize(gm, strict=True, standalone_lifts=True, emit="always")
    assert not report.rules_fired["lift-rms-norm"] and "rms_norm.default" not in gm.code.replace("one_plus", "")
