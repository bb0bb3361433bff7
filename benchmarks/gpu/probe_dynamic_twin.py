"""Device probe: Inductor's code for a native chain compiled per M (``dynamic=False``, as the H200 twin lines
were fitted) against one dynamic compile serving every M for each hint H in ``--hints`` (the compile's first
run at M = H, where Inductor picks and times its Triton configs: 8 as the e2e blocks compile by default, the
largest M as vLLM's profile run at ``max_num_tokens`` does), beside the fused kernel (the ``eqsat::`` op, AITER's Triton kernel on CUDA), with each compile's kernel
launches. The DeepSeek layer's chains: silu + group quant (input [M, 2 x 2304]; as the e2e block writes it,
vLLM's native code, and with ``amax`` for ``max(dim)[0]``; as ``native.py`` writes it) and add + RMSNorm +
group quant (N = 7168); Llama's norm (and add + norm) + per-token quant (N = 4096); the silu chains also with their (q, scale) read by an opaque op, as a GEMM reads
them in a model, instead of being the graph's outputs; gpt-oss's add + norm + pad (N = 2880 to a multiple of
256), alone and with the normed value also read by its router GEMM (bf16, 2880 -> 128, bias) as the block
reads it; Inductor's copy of a strided slice into a contiguous value (what a layout-fixing consumer of a
kernel's sliced output costs); Qwen3-Next's gated norm + group quant as the e2e block writes it, as its
Inductor twin (the composition of references) writes it, and over other views of its heads (the quant
over the flat rows; norm and quant over (M, 32, 128); the twin over heads the pass writes, and its
quant over the token's row), none with a fused kernel here; the DeepSeek block's attention output (heads
beside the token, flattened) and its group quant, against AITER's ``fused_flatten_fp8_group_quant`` reading
the heads through their strides.
CUDA-graph medians, µs.

    export PYTHONPATH=$PWD/.device-site:$PWD:$PWD/benchmarks/gpu PYTHONUNBUFFERED=1
    python3 benchmarks/gpu/probe_dynamic_twin.py [chain names] [--hints 8 1024 8192]
"""

from __future__ import annotations

import argparse
import sys

import gpu_timing
import native
import torch

import eqsat  # noqa: F401  (registers the eqsat:: ops and their CUDA implementations)

MS = (1, 8, 64, 256, 1024, 4096, 8192)
FN = torch.float8_e4m3fn


def vllm_silu_group_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The DeepSeek block's chain as ``e2e_blocks`` writes it: vLLM's ``SiluAndMul.forward_native`` (bf16) and
    ``_quantize_group_native`` (``max(dim)[0]``), not ``native.py``'s fp32 silu and ``amax``."""
    import e2e_blocks

    return e2e_blocks.group_quant(e2e_blocks.silu_and_mul(x))


def amax_silu_group_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's bf16 ``SiluAndMul`` then ``native.py``'s group quant (``amax``): which of the two forms splits."""
    import e2e_blocks

    return native.native_group_quant(e2e_blocks.silu_and_mul(x))


@torch.library.custom_op("probe::consume", mutates_args=())
def consume(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """An opaque consumer of (q, scale), as a W8A8 GEMM is one in a model (it launches nothing)."""
    return q.new_empty((1,), dtype=torch.float32)


@consume.register_fake
def _(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return q.new_empty((1,), dtype=torch.float32)


def into_op(chain):  # noqa: ANN001, ANN201
    """``chain`` whose (q, scale) feed an opaque op instead of being the graph's outputs."""
    return lambda *a: consume(*chain(*a))


def norm_in(n: int, residual: bool):  # noqa: ANN201
    """Inputs of a norm chain of width ``n``: (x, w), or (x, r, w) with a residual."""
    def make(m: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
        rows = (m, n), *(((m, n),) if residual else ())
        return (*(torch.randn(*s, device="cuda", generator=g).to(torch.bfloat16) for s in rows),
                torch.randn(n, device="cuda", generator=g).to(torch.bfloat16))
    return make


def add_into_op(native_chain, fused, n: int) -> tuple:  # noqa: ANN001
    """An add + norm + quant chain whose (q, scale) feed the opaque op, its residual an output: the
    native chain returns (q, scale, residual), the fused op (q, residual, scale)."""
    return (lambda x, r, w: (lambda q, s, res: (consume(q, s), res))(*native_chain(x, r, w)),
            lambda x, r, w: (lambda q, res, s: (consume(q, s), res))(*fused(x, r, w)), norm_in(n, residual=True))


def add_rms_pad_router(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, rw: torch.Tensor,
                       rb: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """gpt-oss's block without its top-k: the normed value padded and read by the router GEMM."""
    y, res = native.native_add_rms(x, r, w)
    return torch.nn.functional.pad(y, (0, -y.shape[-1] % 256)), torch.nn.functional.linear(y, rw, rb), res


def fused_add_rms_pad_router(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, rw: torch.Tensor,
                             rb: torch.Tensor) -> tuple[torch.Tensor, ...]:
    padded, res = torch.ops.eqsat.add_rmsnorm_pad(x, r, w, native.EPS, 256)
    return padded, torch.nn.functional.linear(padded[:, :x.shape[-1]], rw, rb), res


def router_in(m: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    x, r, w = norm_in(2880, residual=True)(m, g)
    return x, r, w, torch.randn(128, 2880, device="cuda", generator=g).to(torch.bfloat16) / 50, \
        torch.randn(128, device="cuda", generator=g).to(torch.bfloat16)


@torch.library.custom_op("probe::consume_one", mutates_args=())
def consume_one(y: torch.Tensor) -> torch.Tensor:
    """An opaque consumer of one contiguous value (it launches nothing)."""
    return y.new_empty((1,), dtype=torch.float32)


@consume_one.register_fake
def _(y: torch.Tensor) -> torch.Tensor:
    return y.new_empty((1,), dtype=torch.float32)


def copy_slice(x: torch.Tensor) -> torch.Tensor:
    """The first 2880 of 3072 columns (gpt-oss's padded rows) copied contiguous for an opaque consumer."""
    return consume_one(x[:, :2880].contiguous())


def qwen_in(m: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    core, z = (torch.randn(m, 4096, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    return core, z, torch.ones(128, device="cuda", dtype=torch.bfloat16)


def _gated32(x: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """vLLM's ``RMSNormGated.forward_native`` over the last dim (fp32, one rounding to bf16)."""
    x32 = x.float()
    out = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    return (out * torch.nn.functional.silu(z.float())).to(x.dtype)


def qwen_gated_quant(core: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Qwen3-Next's gated norm (32 heads of 128) + group quant as ``e2e_blocks.Qwen3NextGatedOut`` writes it."""
    import e2e_blocks

    m = core.shape[0]
    out = _gated32(core.reshape(-1, 128), z.reshape(-1, 128), w)
    return consume(*e2e_blocks.group_quant(out.reshape(m, 4096)))


def qwen_gated_twin(core: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The catalog's Inductor twin of the fused gated norm + quant: its composition of references,
    ``QuantGroup(RmsNormGated(x, z, w, eps), 128, fp8)``."""
    from eqsat.library import reference

    m = core.shape[0]
    q, s = reference.group_fp8_quant(reference.rms_norm_gated(core.reshape(-1, 128), z.reshape(-1, 128), w, 1e-6),
                                     128, FN)
    return consume(q.reshape(m, 4096), s.reshape(m, 32))


def qwen_gated_rows(core: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The same values with the quant on the norm's own rows ([M x 32, 128], one group a row) and only
    its outputs viewed back to [M, 4096] and [M, 32]: no view between the two reductions."""
    import e2e_blocks

    m = core.shape[0]
    q, s = e2e_blocks.group_quant(_gated32(core.reshape(-1, 128), z.reshape(-1, 128), w))
    return consume(q.reshape(m, 4096), s.reshape(m, 32))


def qwen_gated_3d(core: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The same values on [M, 32, 128] views (no symbolic M x 32 dim): the norm and the quant's groups
    are the last dim of one 3-D view."""
    import e2e_blocks

    m = core.shape[0]
    y = _gated32(core.view(m, 32, 128), z.view(m, 32, 128), w)
    return consume(*e2e_blocks.group_quant(y.view(m, 4096)))


def qwen_gated_3d_rows(core: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """3-D views and the quant on them (groups = the last dim), outputs viewed back."""
    import e2e_blocks

    m = core.shape[0]
    q, s = e2e_blocks.group_quant(_gated32(core.view(m, 32, 128), z.view(m, 32, 128), w))
    return consume(q.reshape(m, 4096), s.reshape(m, 32))


def qwen_gated_heads_twin(core: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """What the pass writes for the chain in a dynamic graph, the catalog's twin over heads
    (``IH_rms_gated_group_quant``: ``eqsat.kernels.inductor.OverHeads`` at H = 32): the composition of
    references over the (M, 32, 128) views, its outputs viewed back to the flat rows (written out here:
    Dynamo does not trace into the frozen dataclass)."""
    from eqsat.library import reference

    m = core.shape[0]
    q, s = reference.group_fp8_quant(reference.rms_norm_gated(core.view(m, 32, 128), z.view(m, 32, 128), w, 1e-6),
                                     128, FN)
    return consume(q.reshape(-1, 128).reshape(m, 4096), s.reshape(-1, 1).reshape(m, 32))


def qwen_gated_heads_token_quant(core: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The references' norm over the (M, 32, 128) views, their quant over the token's row (M, 4096)."""
    from eqsat.library import reference

    m = core.shape[0]
    y = reference.rms_norm_gated(core.view(m, 32, 128), z.view(m, 32, 128), w, 1e-6)
    return consume(*reference.group_fp8_quant(y.view(m, 4096), 128, FN))


def attn_in(m: int, g: torch.Generator) -> tuple[torch.Tensor]:
    """The DeepSeek block's attention output, (1, 16 heads, M, 192) laid out as SDPA returns it for its
    (M, 16, 192) query: token-major, each token's heads side by side."""
    return (torch.randn(1, m, 16, 192, device="cuda", generator=g).to(torch.bfloat16).transpose(1, 2),)


def attn_out_group_quant(o: torch.Tensor) -> torch.Tensor:
    """The DeepSeek block's o_proj input as ``e2e_blocks`` writes it (v's first 128 of 192, heads moved
    beside the token, flattened: a copy) and its group quant (vLLM's native code), read by an opaque op."""
    import e2e_blocks

    m = o.shape[2]
    return consume(*e2e_blocks.group_quant(o[0, :, :, :128].transpose(0, 1).reshape(m, 16 * 128)))


def fused_attn_out_group_quant(o: torch.Tensor) -> torch.Tensor:
    """AITER's Triton ``fused_flatten_fp8_group_quant`` reading the same heads through their strides."""
    from eqsat.library.aiter import triton_kernels

    q, s = triton_kernels().fused_flatten_fp8_group_quant(o[0, :, :, :128].transpose(0, 1), 128, dtype_quant=FN)
    return consume(q, s)


def chains() -> dict[str, tuple]:
    own = torch.ops.eqsat

    def silu_in(m: int, g: torch.Generator) -> tuple[torch.Tensor]:
        return (torch.randn(m, 2 * 2304, device="cuda", generator=g).to(torch.bfloat16),)

    return {
        "silu_group_quant_vllm_form_into_op": (into_op(vllm_silu_group_quant),
                                               lambda x: consume(*own.silu_mul_fp8_group_quant(x, 128, FN)), silu_in),
        "silu_group_quant_amax_form_into_op": (into_op(amax_silu_group_quant),
                                               lambda x: consume(*own.silu_mul_fp8_group_quant(x, 128, FN)), silu_in),
        "rms_group_quant_into_op": (into_op(native.native_rms_group_quant),
                                    lambda x, w: consume(*own.rmsnorm_fp8_group_quant(x, w, native.EPS, 128, FN)),
                                    norm_in(1536, residual=False)),
        "add_rms_group_quant_into_op": add_into_op(
            native.native_add_rms_group_quant, lambda x, r, w: own.rmsnorm_add_fp8_group_quant(x, r, w, native.EPS, 128, FN),
            7168),
        "rms_token_quant_into_op": (into_op(native.native_rms_token_quant),
                                    lambda x, w: consume(*own.rmsnorm_token_fp8_quant(x, w, native.EPS, FN)),
                                    norm_in(4096, residual=False)),
        "add_rms_token_quant_into_op": add_into_op(
            native.native_add_rms_token_quant, lambda x, r, w: own.rmsnorm_add_token_fp8_quant(x, r, w, native.EPS, FN),
            4096),
        "silu_group_quant_vllm_form": (vllm_silu_group_quant, lambda x: own.silu_mul_fp8_group_quant(x, 128, FN),
                                       silu_in),
        "silu_group_quant_amax_form": (amax_silu_group_quant, lambda x: own.silu_mul_fp8_group_quant(x, 128, FN),
                                       silu_in),
        "silu_group_quant": (native.native_silu_group_quant,
                             lambda x: own.silu_mul_fp8_group_quant(x, 128, FN), silu_in),
        "add_rms_pad": (lambda x, r, w: native.native_add_rms_pad(x, r, w, 256),
                        lambda x, r, w: own.add_rmsnorm_pad(x, r, w, native.EPS, 256), norm_in(2880, residual=True)),
        "add_rms_pad_router": (add_rms_pad_router, fused_add_rms_pad_router, router_in),
        "add_rms_group_quant": (native.native_add_rms_group_quant,
                                lambda x, r, w: own.rmsnorm_add_fp8_group_quant(x, r, w, native.EPS, 128, FN),
                                norm_in(7168, residual=True)),
        "copy_slice": (copy_slice, None,
                       lambda m, g: (torch.randn(m, 3072, device="cuda", generator=g).to(torch.bfloat16),)),
        "attn_out_group_quant": (attn_out_group_quant, fused_attn_out_group_quant, attn_in),
        "qwen_gated_quant": (qwen_gated_quant, None, qwen_in),
        "qwen_gated_twin": (qwen_gated_twin, None, qwen_in),
        "qwen_gated_rows": (qwen_gated_rows, None, qwen_in),
        "qwen_gated_heads_twin": (qwen_gated_heads_twin, None, qwen_in),
        "qwen_gated_heads_token_quant": (qwen_gated_heads_token_quant, None, qwen_in),
        "qwen_gated_3d": (qwen_gated_3d, None, qwen_in),
        "qwen_gated_3d_rows": (qwen_gated_3d_rows, None, qwen_in),
    }


def launches(fn) -> int:  # noqa: ANN001
    """Kernel launches of a call after a first one (which compiles and times Triton configs)."""
    fn()
    return gpu_timing.count_launches(fn)[0]


def dynamic_compile(chain, make, hint: int, gen: torch.Generator):  # noqa: ANN001, ANN201
    """``chain`` compiled once for every M >= 2, first run at M = ``hint`` (the activations' dim 0 marked)."""
    torch._dynamo.reset()
    dyn = torch.compile(chain, dynamic=None)
    first = make(hint, gen)
    for t in first:
        if t.dim() >= 2 and t.shape[0] == hint:  # the activations (not the weights)
            torch._dynamo.mark_dynamic(t, 0)
    dyn(*first)
    return dyn


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chains", nargs="*", help="chain names (default: all)")
    ap.add_argument("--hints", type=int, nargs="+", default=[8], help="first-run M of each dynamic compile")
    args = ap.parse_args()
    gpu_timing.setup_torch()
    torch._inductor.config.fx_graph_cache = False  # each hint's compile is its own, never a cached one
    print("\n".join(gpu_timing.env_report()), flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, (chain, fused, make) in chains().items():
        if args.chains and name not in args.chains:
            continue
        inputs = {m: make(m, gen) for m in MS}
        t_dyn, n_dyn = {}, {}
        for h in args.hints:
            dyn = dynamic_compile(chain, make, h, gen)
            t_dyn[h] = {m: gpu_timing.bench(lambda a=inputs[m], f=dyn: f(*a), 10, 2)[0] for m in MS}
            n_dyn[h] = {m: launches(lambda a=inputs[m], f=dyn: f(*a)) for m in MS}
        t_static, n_static = {}, {}
        for m in MS:  # one fresh static compile per M
            torch._dynamo.reset()
            static = torch.compile(chain, dynamic=False)
            t_static[m] = gpu_timing.bench(lambda a=inputs[m], f=static: f(*a), 10, 2)[0]
            n_static[m] = launches(lambda a=inputs[m], f=static: f(*a))
        t_fused = {m: gpu_timing.bench(lambda a=inputs[m], f=fused: f(*a), 10, 2)[0] if fused else float("nan")
                   for m in MS}
        heads = " | ".join(f"dynamic Inductor, first run M = {h} (launches)" for h in args.hints)
        print(f"{name}: M | static Inductor (launches) | {heads} | fused kernel", flush=True)
        for m in MS:
            dyns = " | ".join(f"{t_dyn[h][m]:8.2f} ({n_dyn[h][m]})" for h in args.hints)
            print(f"  {m:5d} | {t_static[m]:8.2f} ({n_static[m]}) | {dyns} | {t_fused[m]:8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
