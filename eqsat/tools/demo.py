"""``make demo``: a small decoder-layer-like model through torch.compile, fused by the optimizer.

The model is written with vLLM's op vocabulary (stand-ins with vLLM's exact schemas, since vLLM's
AITER ops exist only on ROCm): the input fused-add rms_norm -> fp8 group quant -> a dequantizing
GEMM, and an MLA-style latent rms_norm -> fp8 group quant. It is compiled with ``torch.compile(dynamic=True)`` on the CPU with
:class:`~eqsat.EqSatPass` as Inductor's post-grad custom pass. The demo prints the post-grad graph
before and after, the report, the pass time over 20 runs on a copy of the graph, and checks that
the compiled outputs agree with eager ones within 1.25 fp8 steps at the larger magnitude of the two
(q·s compared, ``reference.fp8_step_error``: the rounding contract's tolerance, as the tests state it)
and bit-exactly for the residual.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.fx as fx
from torch import nn

import eqsat
from eqsat.fx.capture import copy_graph
from eqsat.kernels.torch_ops import register_vllm_standins
from eqsat.library.reference import fp8_step_error

HIDDEN, GROUP, TOKENS = 512, 128, 16
FP8_STEP_TOLERANCE = 1.25  # fp8 steps at the larger magnitude: a fused kernel skips a bf16 rounding


class DecoderLayerNormQuant(nn.Module):
    """The norm/quant skeleton of a decoder layer, spelled with vLLM ops."""

    def __init__(self, hidden: int = HIDDEN) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.input_norm = nn.Parameter(1 + 0.1 * torch.randn(hidden, generator=g).to(torch.bfloat16))
        self.post_norm = nn.Parameter(1 + 0.1 * torch.randn(hidden, generator=g).to(torch.bfloat16))
        self.proj = nn.Parameter((torch.randn(hidden, hidden, generator=g) / hidden**0.5).to(torch.bfloat16))

    def forward(self, x: torch.Tensor, residual: torch.Tensor, latent: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h, residual = torch.ops.vllm_ir.fused_add_rms_norm(x, residual, self.input_norm, 1e-6)
        q, s = torch.ops.vllm.rocm_aiter_group_fp8_quant(h, GROUP)
        deq = (q.to(torch.float32).unflatten(-1, (-1, GROUP)) * s.unsqueeze(-1)).flatten(-2)
        out = deq.to(torch.bfloat16) @ self.proj
        h2 = torch.ops.vllm_ir.rms_norm(latent.view(-1, HIDDEN), self.post_norm, 1e-5)
        q2, s2 = torch.ops.vllm.rocm_aiter_group_fp8_quant(h2, GROUP)
        return q, s, q2, s2, residual, out


class ShowingPass(eqsat.EqSatPass):
    """EqSatPass that also prints the graph before and after, and times the pass on copies."""

    def __call__(self, graph: fx.Graph) -> None:
        print("=== post-grad graph before ===")
        print(graph.python_code("self").src)
        copies = [copy_graph(graph) for _ in range(21)]
        super().__call__(graph)
        times = []
        for gm in copies[:20]:  # as a compile runs the pass: rules declared once, Inductor recompiles
            start = time.perf_counter()
            eqsat.optimize(gm, self.options, engine=self.engine, recompile=False)
            times.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        eqsat.optimize(copies[20], self.options, recompile=False)
        cold_ms = (time.perf_counter() - start) * 1e3
        print("=== post-grad graph after ===")
        print(graph.python_code("self").src)
        print("=== report ===")
        print(self.last_report.table() if self.last_report else "no report")
        print(f"pass time on this graph: median {statistics.median(times):.1f} ms over {len(times)} runs "
              f"(first run in a process, declaring the rules too: {cold_ms:.1f} ms)")


def main() -> int:
    register_vllm_standins()
    torch._dynamo.reset()
    model = DecoderLayerNormQuant()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(TOKENS, HIDDEN, generator=g).to(torch.bfloat16)
    residual = torch.randn(TOKENS, HIDDEN, generator=g).to(torch.bfloat16)
    latent = torch.randn(TOKENS, HIDDEN, generator=g).to(torch.bfloat16)
    pass_ = ShowingPass(profile="mi300x", sizes=256)
    with torch._inductor.config.patch(post_grad_custom_post_pass=pass_, fx_graph_cache=False):
        compiled = torch.compile(model, dynamic=True)
        with torch.no_grad():
            got = compiled(x, residual, latent)
    with torch.no_grad():
        want = model(x, residual, latent)
    steps = max(fp8_step_error(got[0], got[1], want[0], want[1], GROUP),
                fp8_step_error(got[2], got[3], want[2], want[3], GROUP))
    residual_exact = torch.equal(got[4], want[4])
    gemm_rel = ((got[5].float() - want[5].float()).norm() / want[5].float().norm()).item()
    report = pass_.last_report
    fused = report is not None and sum(report.kernels_chosen.values()) == 2
    print(f"fused kernels chosen: {dict(report.kernels_chosen) if report else {}}")
    print(f"compiled vs eager: q*s within {steps:.3f} fp8 steps (tolerance {FP8_STEP_TOLERANCE}); "
          f"residual bit-exact: {residual_exact}; GEMM output relative error {gemm_rel:.2e} "
          "(it consumes the fp8 values, so it inherits their one-step differences)")
    ok = fused and steps <= FP8_STEP_TOLERANCE and residual_exact
    print("DEMO OK" if ok else "DEMO FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
