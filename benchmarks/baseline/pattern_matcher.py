"""The peer: the same fusion family written the way vLLM 0.33.0 writes it, on Inductor's matcher.

``PatternMatcherBaseline()`` registers, like ``RocmAiterRMSNormQuantFusionPass`` and
``RocmAiterSiluMulFp8GroupQuantFusionPass`` (``reference/vllm-facts.md`` §1.2-1.3, §4.6), one
``register_replacement`` per pattern and variant, in vLLM's order, ``for eps in [1e-5, 1e-6]``:

- ``double``       (#5): ``rms_norm`` with exactly two consumers, each a group quant -> two fused calls;
- ``double_view``  (#6): ``rms_norm -> reshape(-1, N) ->`` two group quants -> two fused calls;
- ``rms``          (#3): ``rms_norm -> group quant`` -> ``rocm_aiter_rmsnorm_fp8_group_quant``;
- ``add_rms``      (#4): ``fused_add_rms_norm[0] -> group quant`` (``[1]`` an output)
  -> ``rocm_aiter_rmsnorm_with_add_fp8_group_quant``;

and, in a second pass as vLLM does, ``silu`` (#10, no eps): ``silu_and_mul -> group quant`` ->
``rocm_aiter_act_mul_and_fp8_group_quant``. That is 9 registrations. Patterns are traced from
search and replacement functions under ``FakeTensorMode`` on vLLM's example shapes (bf16
``(5, 16)``; ``(5, 4)`` for silu) with ``fwd_only`` followed by ``view_to_reshape`` (vLLM's
``_trace_fn``: Inductor's graphs hold only ``aten.reshape``). The silu op is spelled as the
benchmark graphs spell it (``torch.ops.eqsat.silu_and_mul``; vLLM's matcher emits the graph's
form, ``_C.silu_and_mul`` or native), the quant as AITER's functional op (``quant_fp8`` enabled,
the ROCm default).

Registration is done once per instance (``registration_s`` says how long it took); ``apply(gm)``
runs both passes on a graph and returns the number of replacements. ``patterns=`` registers a
subset (tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch._inductor import pattern_matcher as pm
from torch._inductor.fx_passes.post_grad import view_to_reshape
from torch._subclasses.fake_tensor import FakeTensorMode

from benchmarks.graphs.models import register_ops

EPSILONS = (1e-5, 1e-6)
GROUP = 128
NORM_PATTERNS = ("double", "double_view", "rms", "add_rms")  # vLLM's registration order (§1.3)
ACT_PATTERNS = ("silu",)
PATTERNS = NORM_PATTERNS + ACT_PATTERNS


def trace_fn(*args: Any, **kwargs: Any) -> fx.GraphModule:
    """vLLM's ``VllmFusionPatternMatcherPass._trace_fn``: ``fwd_only``, then views as reshapes."""
    gm = pm.fwd_only(*args, **kwargs)
    view_to_reshape(gm)
    return gm


def _norm_pattern(name: str, eps: float) -> tuple[Callable[..., Any], Callable[..., Any], list[torch.Tensor]]:
    """(search, replacement, example inputs) of one rms-norm + group-quant variant."""
    vllm, vir = torch.ops.vllm, torch.ops.vllm_ir
    quant, fused = vllm.rocm_aiter_group_fp8_quant.default, vllm.rocm_aiter_rmsnorm_fp8_group_quant.default
    x, w = torch.empty(5, 16, dtype=torch.bfloat16), torch.empty(16, dtype=torch.bfloat16)

    if name == "rms":
        def search(x, w):
            q = quant(vir.rms_norm.default(x, w, eps), GROUP)
            return q[0], q[1]

        def replace(x, w):
            q = fused(x, w, eps, GROUP)
            return q[0], q[1]
        return search, replace, [x, w]

    if name == "add_rms":
        def search(x, r, w):
            normed = vir.fused_add_rms_norm.default(x, r, w, eps)
            q = quant(normed[0], GROUP)
            return q[0], q[1], normed[1]

        def replace(x, r, w):
            q = vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant.default(x, r, w, eps, GROUP)
            return q[0], q[2], q[1]  # the op returns (q, residual_out, scale)
        return search, replace, [x, torch.empty_like(x), w]

    if name in ("double", "double_view"):
        def search(x, w):
            y = vir.rms_norm.default(x, w, eps)
            if name == "double_view":
                y = y.view(-1, x.shape[-1])
            q1, q2 = quant(y, GROUP), quant(y, GROUP)
            return q1[0], q1[1], q2[0], q2[1]

        def replace(x, w):  # vLLM recomputes the norm rather than materialise it (L305-308)
            q1, q2 = fused(x, w, eps, GROUP), fused(x, w, eps, GROUP)
            return q1[0], q1[1], q2[0], q2[1]
        return search, replace, [x, w]
    raise ValueError(f"unknown norm pattern {name!r}")


def _silu_pattern() -> tuple[Callable[..., Any], Callable[..., Any], list[torch.Tensor]]:
    vllm = torch.ops.vllm

    def search(x):
        q = vllm.rocm_aiter_group_fp8_quant.default(torch.ops.eqsat.silu_and_mul.default(x), GROUP)
        return q[0], q[1]

    def replace(x):
        q = vllm.rocm_aiter_act_mul_and_fp8_group_quant.default(x, GROUP)
        return q[0], q[1]
    return search, replace, [torch.empty(5, 4, dtype=torch.bfloat16)]


class PatternMatcherBaseline:
    """Two ``PatternMatcherPass``es (norm + quant, silu + quant), registered once at construction."""

    def __init__(self, patterns: Iterable[str] = PATTERNS, epsilons: Sequence[float] = EPSILONS) -> None:
        register_ops()
        wanted = set(patterns)
        if wanted - set(PATTERNS):
            raise ValueError(f"unknown patterns {sorted(wanted - set(PATTERNS))}; choose from {PATTERNS}")
        self.norm_pass = pm.PatternMatcherPass(pass_name="rocm_aiter_rms_norm_quant_fusion_pass")
        self.act_pass = pm.PatternMatcherPass(pass_name="rocm_aiter_silu_mul_fp8_group_quant_fusion_pass")
        self.registrations = 0
        start = time.perf_counter()
        with FakeTensorMode():  # vLLM's @enable_fake_mode
            for eps in epsilons:
                for name in NORM_PATTERNS:
                    if name in wanted:
                        self._register(*_norm_pattern(name, eps), self.norm_pass)
            if "silu" in wanted:
                self._register(*_silu_pattern(), self.act_pass)
        self.registration_s = time.perf_counter() - start

    def _register(self, search: Callable[..., Any], replace: Callable[..., Any], inputs: list[torch.Tensor],
                  pass_: pm.PatternMatcherPass) -> None:
        pm.register_replacement(search, replace, inputs, trace_fn, pass_)
        self.registrations += 1

    def apply(self, gm: fx.GraphModule) -> int:
        """Run both passes on ``gm`` in place (vLLM's order); the number of replacements."""
        count = self.norm_pass.apply(gm.graph) + self.act_pass.apply(gm.graph)
        gm.graph.eliminate_dead_code()  # vLLM's post_cleanup (the matcher leaves dead nodes)
        return count
