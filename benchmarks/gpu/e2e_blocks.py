"""Model blocks as users write them, for the end-to-end benchmark ``e2e.py`` (issue 29, part 3).

Plain PyTorch ``nn.Module``s, no custom ops: norms as Hugging Face writes ``LlamaRMSNorm`` (with a
residual, the add first as vLLM's ``RMSNorm.forward_static`` writes it: fp32 add, residual rounded; or
HF's bf16 ``residual + hidden`` with ``residual="hf"``); vLLM's native fp8 quant (``QuantFP8``'s
``_quantize_group_native``, the values of ``native.native_group_quant``: group 128, scale = max|x| / 448
floored at 1 / (448 * 512), float8_e4m3fn; per-token as ``QuantFP8.forward_native``); vLLM's
``SiluAndMul.forward_native`` and ``RMSNormGated`` native; real fp8 GEMMs (``Linear``: an opaque op reading q, its
scales and the checkpoint's fp8 weight with its 128x128 block or per-channel scales, ``GEMMS``: AITER's Triton
W8A8 GEMMs, ``torch._scaled_mm``, or dequantise + bf16 GEMM); attention as ``F.scaled_dot_product_attention``
(causal, the M tokens one sequence, no RoPE: elementwise work Inductor fuses and no rule reads).

- ``deepseek``: DeepSeek-V3 decoder layer, TP 8 (hidden 7168, q_lora 1536, kv_lora 512 + rope 64, 16 heads
  of qk 128 + 64 and v 128, dense MLP 18432 / 8): add + norm + group quant -> fused q_a/kv_a GEMM; q_a norm
  + quant -> q_b GEMM; kv_a norm -> kv_b GEMM (bf16); SDPA (v padded to the qk head dim, as HF's
  DeepSeek does for flash attention); group quant -> o_proj; add + norm + quant -> gate_up; silu_and_mul +
  quant -> down. Outputs (out, residual).
- ``llama``: Llama-3.1-8B FP8 layer (hidden 4096, 32 / 8 kv heads of 128, MLP 14336), dynamic per-token
  quant before each GEMM (``quant="group"``: group quant instead), GQA as HF's ``repeat_kv``.
- ``qwen3next``: Qwen3-Next gated-attention output: the GDN core output and its gate ``z`` (32 value heads
  of 128, TP 1, as ``benchmarks/graphs/models.py``) viewed (-1, 128), vLLM's ``RMSNormGated`` native
  (norm before gate, silu(z)), viewed back (M, 4096), group quant -> out_proj (to hidden 2048).
- ``gptoss``: gpt-oss (120b) post-attention: add + RMSNorm (hidden 2880), router GEMM (bf16, bias) to 128
  experts, top-4 with softmax over the top 4 (``router_logits`` returned too, as vLLM hands them to the
  MoE), and the normed state zero-padded to a multiple of 256 for the MoE (``F.pad``).

``BLOCKS`` names them; ``tiny=True`` gives the same structure at small widths (every quantised width a
multiple of 128) for the CPU dry run. Each block's ``outputs`` says how ``e2e.py`` checks each output;
``block.fp8 = False`` (eager only) replaces every quant by the identity, to measure the fp8 noise floor.
Run them through the benchmark: ``.venv/bin/python benchmarks/gpu/e2e.py --dry-run`` (CPU), or on the GPU
as ``e2e.py``'s docstring says.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import native
import torch
import torch.nn.functional as F
from torch import nn

FP8 = torch.float8_e4m3fn
FP8_MAX = native.FP8_MAX  # 448: float8_e4m3fn, the H200's
FP8_MIN_SCALE = 1.0 / (FP8_MAX * 512.0)  # vLLM's _FP8_MIN_SCALING_FACTOR
G = 128
BF16 = torch.bfloat16


# -- the ops, as vLLM / Hugging Face write them ------------------------------------------------------------

def gemm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The bf16 GEMM of the unquantised projections (``x @ w.t()``)."""
    return x @ w.t()


def dequant(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """fp32 values of ``q`` [R, K] with scales ``s``: [R, 1] per row; [R, ceil(K / 128)] per group of 128;
    [ceil(R / 128), ceil(K / 128)] per 128x128 block (a weight's)."""
    r, k = q.shape
    rows = 1 if s.shape[0] == r else G
    cols = k if s.shape[-1] == 1 else G
    full = s.repeat_interleave(rows, 0)[:r].repeat_interleave(cols, 1)[:, :k]
    return q.float() * full


def dequant_gemm(q: torch.Tensor, s: torch.Tensor, wq: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
    """The W8A8 product as a dequantise of both operands (``dequant``) + a bf16 GEMM: ``q`` [M, K] fp8 with its
    groups' or tokens' scales ``s``, ``wq`` [N, K] fp8 with its blocks' or channels' scales ``ws``."""
    return gemm(dequant(q, s).to(BF16), dequant(wq, ws).to(BF16))


def scaled_mm(q: torch.Tensor, s: torch.Tensor, wq: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
    """``torch._scaled_mm``: per token x per channel (s [M, 1], ws [N, 1]: row-wise), or activation groups
    1x128 x weight blocks 128x128 (block-wise: the activation's scales outer-dim-major, as cuBLAS reads them).
    On the H200 the block-wise one has no kernel at M = 1 and is wrong at K / 128 = 18; torch rejects scales
    with a padded leading dimension ("Invalid scaling configuration"), so that cannot be laid out around."""
    if s.shape[-1] == 1:
        return torch._scaled_mm(q, wq.t(), scale_a=s, scale_b=ws.t(), out_dtype=BF16)
    return torch._scaled_mm(q, wq.t(), scale_a=s.t().contiguous().t(), scale_b=ws.t(), out_dtype=BF16)


TUNED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gemm_tuned.json")
"""``tune_gemm.py``'s table: per GPU name, per "N,K", per M: AITER's fastest block-scale config and its µs,
cuBLAS's block-wise µs and error."""


@functools.cache
def tuned_table(gpu: str) -> dict[str, dict[str, dict]]:
    if not os.path.exists(TUNED):
        return {}
    with open(TUNED) as f:
        return json.load(f).get(gpu, {})


def table_note(gpu: str) -> str:
    """One line for a run's report: whether ``gpu`` has a tuned GEMM table, and what runs without one."""
    if tuned_table(gpu):
        return f"gemm table: tuned for {gpu} ({os.path.basename(TUNED)})"
    return (f"gemm table: NONE for {gpu}: block-wise GEMMs run AITER's own (MI300) configs at M <= 64 and cuBLAS "
            "above, whose result at K = 2304 is wrong on the H100 and the H200; run tune_gemm.py on this card first")


def tuned(q: torch.Tensor, wq: torch.Tensor) -> dict | None:
    """The tuned entry for this block-wise GEMM on this GPU: the smallest measured M >= q's (None above the
    largest, for an untuned shape, or off CUDA)."""
    if not q.is_cuda:
        return None
    by_m = tuned_table(torch.cuda.get_device_properties(q.device).name).get(f"{wq.shape[0]},{q.shape[1]}", {})
    above = [int(m) for m in by_m if int(m) >= q.shape[0]]
    return by_m[str(min(above))] if above else None


def aiter_gemm(q: torch.Tensor, s: torch.Tensor, wq: torch.Tensor, ws: torch.Tensor,
               config: dict | None = None) -> torch.Tensor:
    """AITER's Triton W8A8 GEMMs (from the installed wheel, loaded as the project loads AITER):
    ``gemm_a8w8_blockscale`` for activation groups 1x128 x weight blocks 128x128, ``gemm_a8w8`` for per token
    x per channel; with ``config``, else this GPU's tuned config (``tuned``), else AITER's own less the
    AMD-only options (``aiter.portable``)."""
    from eqsat.library.aiter import portable, triton_module

    m, k = q.shape
    n = wq.shape[0]
    name = "gemm_a8w8" if s.shape[-1] == 1 else "gemm_a8w8_blockscale"
    if config is None and s.shape[-1] > 1:
        config = (tuned(q, wq) or {}).get("config")
    if config is None:
        config = portable(triton_module(f"_triton_kernels.{name}")._get_config(m, n, k))
    config = dict(config)  # the wrapper writes its derived sizes into it
    if s.shape[-1] == 1:
        return triton_module(name).gemm_a8w8(q, wq, s, ws.t(), dtype=BF16, config=config)
    return triton_module(name).gemm_a8w8_blockscale(q, wq, s, ws, BF16, config=config)


def right(entry: dict) -> bool:
    """cuBLAS's block-wise result was right at the entry's shape (it has a kernel there, error < 1e-2)."""
    return bool(entry.get("scaled_mm_err", float("nan")) < 1e-2)


def choice(entry: dict | None, m: int) -> str:
    """The block-wise GEMM ``dispatch_gemm`` runs at M = ``m`` given its tuned entry (``tuned``): AITER's Triton
    GEMM where its tuned config beat cuBLAS or cuBLAS was wrong or had no kernel, cuBLAS otherwise; without an
    entry, AITER at M <= 64 and cuBLAS above (``benchmarks/results/gemm_h200.md``: AITER's AMD-tuned large-M
    configs run 30-150x slower on the H200)."""
    if entry is None:
        return "aiter" if m <= 64 else "scaled_mm"
    return "aiter" if not right(entry) or entry.get("us", math.inf) < entry["scaled_mm_us"] else "scaled_mm"


def dispatch_gemm(q: torch.Tensor, s: torch.Tensor, wq: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
    """The fastest correct fp8 GEMM per shape, as vLLM picks a W8A8 GEMM per shape: per token, cuBLAS;
    block-wise, ``choice``."""
    if s.shape[-1] == 1:
        return scaled_mm(q, s, wq, ws)
    return GEMMS[choice(tuned(q, wq), q.shape[0])](q, s, wq, ws)


GEMMS: dict[str, Callable[..., torch.Tensor]] = {"dequant": dequant_gemm, "scaled_mm": scaled_mm,
                                                  "aiter": aiter_gemm, "dispatch": dispatch_gemm}
"""The fp8 GEMMs a block can run, each an opaque op ``e2e::w8a8_<name>`` (q, s, wq, ws) -> bf16 [M, N]
(on the CPU every one computes ``dequant_gemm``)."""


def _register(name: str, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    @torch.library.custom_op(f"e2e::w8a8_{name}", mutates_args=())
    def op(q: torch.Tensor, s: torch.Tensor, wq: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
        return (fn if q.is_cuda else dequant_gemm)(q, s, wq, ws)

    @op.register_fake
    def _(q: torch.Tensor, s: torch.Tensor, wq: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
        return q.new_empty((q.shape[0], wq.shape[0]), dtype=BF16)

    return op


W8A8 = {name: _register(name, fn) for name, fn in GEMMS.items()}


def quant_weight(w: torch.Tensor, per_channel: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A checkpoint's fp8 weight: 128x128 blocks (DeepSeek's; scales [ceil(N / 128), ceil(K / 128)], the
    last blocks partial) or per output channel (scales [N, 1]); scale = max|w| / 448 over the block."""
    n, k = w.shape
    rows, cols = (1, k) if per_channel else (G, G)
    pn, pk = -n % rows, -k % cols
    blocks = F.pad(w.float(), (0, pk, 0, pn)).view((n + pn) // rows, rows, (k + pk) // cols, cols)
    s = (blocks.abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=1e-12)
    q = (blocks / s[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8).view(n + pn, k + pk)[:n, :k]
    return q.contiguous(), s


def group_quant(x: torch.Tensor, group_size: int = G) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``QuantFP8._quantize_group_native`` (e4m3fn, 448, scale floored at 1 / (448 * 512)): the
    values of ``native.native_group_quant``, written as vLLM writes them (``max(dim)[0]``, not ``amax``:
    the form the project's lift rule reads)."""
    orig_shape = x.shape
    hidden_dim = x.shape[-1]
    num_groups = (hidden_dim + group_size - 1) // group_size
    padded_dim = num_groups * group_size
    if padded_dim != hidden_dim:
        x = F.pad(x, (0, padded_dim - hidden_dim), mode="constant", value=0.0)
    x_grouped = x.view(-1, num_groups, group_size)
    absmax = x_grouped.abs().max(dim=-1, keepdim=True)[0].float()
    scales = (absmax / FP8_MAX).clamp(min=FP8_MIN_SCALE)
    x_scaled = x_grouped / scales
    x_quant = x_scaled.clamp(-FP8_MAX, FP8_MAX).to(FP8)
    x_quant = x_quant.view(-1, padded_dim)
    if padded_dim != hidden_dim:
        x_quant = x_quant[..., :hidden_dim]
    x_quant = x_quant.view(orig_shape)
    scales = scales.squeeze(-1)
    scales = scales.reshape(orig_shape[:-1] + (num_groups,))
    return x_quant, scales


def token_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM 0.33.0's ``QuantFP8.forward_native``, dynamic per-token: scale [M, 1] fp32."""
    x_max = x.abs().amax(dim=-1).unsqueeze(-1).to(torch.float32)
    scale = (x_max / FP8_MAX).clamp(min=FP8_MIN_SCALE)
    out = (x.to(torch.float32) * scale.reciprocal()).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return out, scale


def silu_and_mul(x: torch.Tensor, ops: str = "native") -> torch.Tensor:
    """vLLM's ``SiluAndMul``: ``forward_native``, or with vLLM's ops its custom op into a fresh output."""
    d = x.shape[-1] // 2
    if ops == "vllm":
        out = x.new_empty((*x.shape[:-1], d))
        torch.ops._C.silu_and_mul(out, x)
        return out
    return F.silu(x[..., :d]) * x[..., d:]


def use_vllm_ops(block: nn.Module) -> nn.Module:
    """``block`` written in vLLM's op vocabulary (``ops = "vllm"`` on it and its norms): vLLM-IR's
    ``rms_norm`` / ``fused_add_rms_norm``, AITER's ``rocm_aiter_group_fp8_quant`` /
    ``rocm_aiter_per_token_quant``, ``_C.silu_and_mul``, ``rocm_unquantized_gemm`` for a bf16 projection,
    as vLLM's model code calls them on ROCm with AITER. The project's stand-ins for vLLM 0.33.0's ops
    (vLLM's schemas and fakes; on a GPU AITER's Triton kernels) are registered with this GPU's fp8."""
    from eqsat.kernels.torch_ops import register_vllm_standins
    from eqsat.library.vllm import standin_fp8_dtype

    register_vllm_standins(FP8)
    if standin_fp8_dtype() != FP8:
        raise RuntimeError(f"vLLM's stand-ins were registered with {standin_fp8_dtype()} in this process, not {FP8}")
    for m in block.modules():
        if getattr(m, "residual_mode", "vllm") != "vllm":
            raise ValueError("vLLM-IR's fused_add_rms_norm adds in fp32 (residual='vllm'), not as HF's bf16 add")
        if hasattr(m, "ops"):
            m.ops = "vllm"
    return block


class RMSNorm(nn.Module):
    """Hugging Face's ``LlamaRMSNorm``; called with a residual, the add first: vLLM's fp32 fused add
    (``residual="vllm"``, ``RMSNorm.forward_static``: the norm of the fp32 sum, the sum rounded as the new
    residual) or HF's bf16 ``residual + hidden`` (``residual="hf"``). Returns (normed, residual) then."""

    def __init__(self, n: int, eps: float, residual: str = "vllm") -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, dtype=BF16), requires_grad=False)
        self.variance_epsilon = eps
        self.residual_mode = residual
        self.ops = "native"  # "vllm": vLLM-IR's ops (``use_vllm_ops``; the fp32 add, as residual="vllm")

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):  # noqa: ANN201
        if self.ops == "vllm":
            if residual is None:
                return torch.ops.vllm_ir.rms_norm(x, self.weight, self.variance_epsilon)
            return tuple(torch.ops.vllm_ir.fused_add_rms_norm(x, residual, self.weight, self.variance_epsilon))
        input_dtype = x.dtype
        if residual is not None and self.residual_mode == "hf":
            x = residual + x
            residual = x
        x = x.to(torch.float32)
        if residual is not None and self.residual_mode == "vllm":
            x = x + residual.to(torch.float32)
            residual = x.to(input_dtype)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.variance_epsilon)
        out = self.weight * x.to(input_dtype)
        return out if residual is None else (out, residual)


class RMSNormGated(nn.Module):
    """vLLM's ``RMSNormGated.forward_native`` with ``norm_before_gate=True``, no group: fp32 norm, times
    the fp32 weight, times silu(z) in fp32, cast back."""

    def __init__(self, n: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, dtype=BF16), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        variance = x32.pow(2).mean(-1, keepdim=True)
        out = x32 * torch.rsqrt(variance + self.eps) * self.weight.float()
        out = out * F.silu(z.float())
        return out.to(x.dtype)


class Linear(nn.Module):
    """A projection [N, K]: applied to a bf16 activation, a bf16 GEMM with the dequantised weight; to an fp8
    (q, scale) pair, an fp8 GEMM with the fp8 weight (128x128 blocks for group-quantised activations, per
    channel for per-token ones): ``gemm`` names it (``GEMMS``: each an opaque op reading q and s from memory,
    as a real W8A8 GEMM does), or ``"inline"``: ``dequant_gemm`` written in the graph (Inductor may then fuse
    the activation's dequant into its quant)."""

    def __init__(self, k: int, n: int, bias: bool = False) -> None:
        super().__init__()
        self.gemm = "dispatch"
        self.ops = "native"  # "vllm": a bf16 projection is vLLM's rocm_unquantized_gemm
        self.weight = nn.Parameter(torch.empty(n, k, dtype=BF16), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(n, dtype=BF16), requires_grad=False) if bias else None

    def quantize(self) -> None:
        """The fp8 checkpoint weights from ``weight``, both layouts; ``weight`` becomes their block dequant."""
        for name, per_channel in (("block", False), ("channel", True)):
            q, s = quant_weight(self.weight.data, per_channel)
            self.register_buffer(f"wq_{name}", q)
            self.register_buffer(f"ws_{name}", s)
        self.weight.data = dequant(self.wq_block, self.ws_block).to(BF16)

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        if scale is None and self.ops == "vllm":
            return torch.ops.vllm.rocm_unquantized_gemm(x, self.weight, self.bias)
        if scale is None or x.dtype != FP8:  # bf16, or the fp8 noise floor's unquantised reference
            y = gemm(x.to(BF16), self.weight)
        else:
            layout = "channel" if scale.shape[-1] == 1 else "block"
            wq, ws = getattr(self, f"wq_{layout}"), getattr(self, f"ws_{layout}")
            y = (dequant_gemm if self.gemm == "inline" else W8A8[self.gemm])(x, scale, wq, ws)
        return y if self.bias is None else y + self.bias


# -- the blocks -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Out:
    """One output of a block and how ``e2e.py`` checks it: ``"bf16"`` (relative error),
    ``"ids"`` (top-k ids: the reference's logits at the chosen ids reach its k-th largest; ``logits``: the
    output index of the router logits), ``"fp8"`` (q, followed by its ``"scale"``: fp8 steps)."""

    name: str
    kind: str = "bf16"
    logits: int = -1


class Block(nn.Module):
    outputs: tuple[Out, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        self.fp8 = True  # False (eager only): every quant is the identity, the fp8 noise floor's reference
        self.ops = "native"  # "vllm": vLLM's ops (``use_vllm_ops``)

    def quant(self, x: torch.Tensor, mode: str = "group") -> tuple[torch.Tensor, torch.Tensor]:
        if not self.fp8:
            return x.float(), torch.ones(x.shape[0], x.shape[1] // G if mode == "group" else 1,
                                         dtype=torch.float32, device=x.device)
        if self.ops == "vllm":
            if mode == "group":
                return tuple(torch.ops.vllm.rocm_aiter_group_fp8_quant(x, G))
            return tuple(torch.ops.vllm.rocm_aiter_per_token_quant(x, FP8))
        return group_quant(x) if mode == "group" else token_quant(x)

    def example_inputs(self, m: int, device: torch.device | str, seed: int = 0) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError


def _randn(gen: torch.Generator, *shape: int, scale: float = 1.0, device: torch.device | str = "cpu") -> torch.Tensor:
    return (scale * torch.randn(*shape, generator=gen, dtype=torch.float32, device=device)).to(BF16)


def init_weights(block: nn.Module, seed: int = 1234) -> None:
    """Norm weights 1 + 0.2 N(0, 1), GEMM weights N(0, 1 / K), biases 0.1 N(0, 1): activations O(1)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for name, p in block.named_parameters():
            w = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("bias"):
                w = 0.1 * w
            elif p.dim() == 1:
                w = 1.0 + 0.2 * w
            else:
                w = w / p.shape[1] ** 0.5
            p.copy_(w.to(p.dtype))


@dataclass(frozen=True)
class DeepSeekCfg:
    hidden: int = 7168
    q_lora: int = 1536
    kv_lora: int = 512
    rope: int = 64
    heads: int = 16  # 128 / TP 8
    qk_nope: int = 128
    v_head: int = 128
    inter: int = 18432 // 8
    eps: float = 1e-6


class DeepSeekV3Layer(Block):
    outputs = (Out("out"), Out("residual"))

    def __init__(self, c: DeepSeekCfg, residual: str = "vllm") -> None:
        super().__init__()
        self.c = c
        qk = c.qk_nope + c.rope
        self.input_layernorm = RMSNorm(c.hidden, c.eps, residual)
        self.fused_qkv_a_proj = Linear(c.hidden, c.q_lora + c.kv_lora + c.rope)
        self.q_a_layernorm = RMSNorm(c.q_lora, c.eps)
        self.q_b_proj = Linear(c.q_lora, c.heads * qk)
        self.kv_a_layernorm = RMSNorm(c.kv_lora, c.eps)
        self.kv_b_proj = Linear(c.kv_lora, c.heads * (c.qk_nope + c.v_head))
        self.o_proj = Linear(c.heads * c.v_head, c.hidden)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps, residual)
        self.gate_up_proj = Linear(c.hidden, 2 * c.inter)
        self.down_proj = Linear(c.inter, c.hidden)

    def attention(self, q: torch.Tensor, kv_c: torch.Tensor, k_pe: torch.Tensor) -> torch.Tensor:
        c = self.c
        m, qk = q.shape[0], c.qk_nope + c.rope
        q = q.view(m, c.heads, qk).transpose(0, 1)  # [H, M, qk]
        kv = self.kv_b_proj(kv_c).view(m, c.heads, c.qk_nope + c.v_head).transpose(0, 1)
        k_nope, v = kv.split([c.qk_nope, c.v_head], dim=-1)
        k = torch.cat([k_nope, k_pe.unsqueeze(0).expand(c.heads, m, c.rope)], dim=-1)
        v = F.pad(v, [0, qk - c.v_head])  # as HF's DeepSeek pads v for flash attention
        o = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), is_causal=True)
        return o[0, :, :, : c.v_head].transpose(0, 1).reshape(m, c.heads * c.v_head)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.c
        h, residual = self.input_layernorm(hidden, residual)
        qkv = self.fused_qkv_a_proj(*self.quant(h))
        q_c, kv_lora = qkv.split([c.q_lora, c.kv_lora + c.rope], dim=-1)  # as vLLM's DeepseekV2 MLA splits
        kv_c, k_pe = kv_lora.split([c.kv_lora, c.rope], dim=-1)
        q = self.q_b_proj(*self.quant(self.q_a_layernorm(q_c)))
        attn = self.attention(q, self.kv_a_layernorm(kv_c), k_pe)
        o = self.o_proj(*self.quant(attn))
        h2, residual = self.post_attention_layernorm(o, residual)
        gate_up = self.gate_up_proj(*self.quant(h2))
        out = self.down_proj(*self.quant(silu_and_mul(gate_up, self.ops)))
        return out, residual

    def example_inputs(self, m: int, device: torch.device | str, seed: int = 0) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator(device=device).manual_seed(seed)
        return _randn(gen, m, self.c.hidden, device=device), _randn(gen, m, self.c.hidden, device=device)


@dataclass(frozen=True)
class LlamaCfg:
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    inter: int = 14336
    eps: float = 1e-5


class LlamaFp8Layer(Block):
    outputs = (Out("out"), Out("residual"))

    def __init__(self, c: LlamaCfg, residual: str = "vllm", quant: str = "token") -> None:
        super().__init__()
        self.c, self.mode = c, quant
        self.input_layernorm = RMSNorm(c.hidden, c.eps, residual)
        self.qkv_proj = Linear(c.hidden, (c.heads + 2 * c.kv_heads) * c.head_dim)
        self.o_proj = Linear(c.heads * c.head_dim, c.hidden)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps, residual)
        self.gate_up_proj = Linear(c.hidden, 2 * c.inter)
        self.down_proj = Linear(c.inter, c.hidden)

    def attention(self, qkv: torch.Tensor) -> torch.Tensor:
        c = self.c
        m, d = qkv.shape[0], c.head_dim
        q, k, v = qkv.split([c.heads * d, c.kv_heads * d, c.kv_heads * d], dim=-1)
        q = q.view(m, c.heads, d).transpose(0, 1)
        rep = c.heads // c.kv_heads

        def repeat_kv(t: torch.Tensor) -> torch.Tensor:  # HF's repeat_kv
            t = t.view(m, c.kv_heads, d).transpose(0, 1)
            return t[:, None].expand(c.kv_heads, rep, m, d).reshape(c.heads, m, d)

        o = F.scaled_dot_product_attention(q.unsqueeze(0), repeat_kv(k).unsqueeze(0), repeat_kv(v).unsqueeze(0),
                                           is_causal=True)
        return o[0].transpose(0, 1).reshape(m, c.heads * d)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, residual = self.input_layernorm(hidden, residual)
        attn = self.attention(self.qkv_proj(*self.quant(h, self.mode)))
        o = self.o_proj(*self.quant(attn, self.mode))
        h2, residual = self.post_attention_layernorm(o, residual)
        gate_up = self.gate_up_proj(*self.quant(h2, self.mode))
        out = self.down_proj(*self.quant(silu_and_mul(gate_up, self.ops), self.mode))
        return out, residual

    def example_inputs(self, m: int, device: torch.device | str, seed: int = 0) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator(device=device).manual_seed(seed)
        return _randn(gen, m, self.c.hidden, device=device), _randn(gen, m, self.c.hidden, device=device)


@dataclass(frozen=True)
class QwenCfg:
    heads: int = 32  # value heads (TP 1)
    head_dim: int = 128
    hidden: int = 2048
    eps: float = 1e-6


class Qwen3NextGatedOut(Block):
    outputs = (Out("out"),)

    def __init__(self, c: QwenCfg) -> None:
        super().__init__()
        self.c = c
        self.norm = RMSNormGated(c.head_dim, c.eps)
        self.out_proj = Linear(c.heads * c.head_dim, c.hidden)

    def forward(self, core: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        c = self.c
        m = core.shape[0]
        y = self.norm(core.reshape(-1, c.head_dim), z.reshape(-1, c.head_dim))
        y = y.reshape(m, c.heads * c.head_dim)
        return self.out_proj(*self.quant(y))

    def example_inputs(self, m: int, device: torch.device | str, seed: int = 0) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator(device=device).manual_seed(seed)
        n = self.c.heads * self.c.head_dim
        return _randn(gen, m, n, device=device), _randn(gen, m, n, device=device)


@dataclass(frozen=True)
class GptOssCfg:
    hidden: int = 2880
    experts: int = 128
    topk: int = 4
    multiple: int = 256
    eps: float = 1e-5


class GptOssRouterPad(Block):
    outputs = (Out("padded"), Out("router_logits"), Out("topk_weights"), Out("topk_ids", "ids", logits=1),
               Out("residual"))

    def __init__(self, c: GptOssCfg, residual: str = "vllm") -> None:
        super().__init__()
        self.c = c
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps, residual)
        self.router = Linear(c.hidden, c.experts, bias=True)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c = self.c
        h, residual = self.post_attention_layernorm(hidden, residual)
        logits = self.router(h)
        top_v, top_i = torch.topk(logits, c.topk, dim=-1)
        weights = torch.softmax(top_v.float(), dim=-1).to(h.dtype)
        pad = -c.hidden % c.multiple
        return F.pad(h, (0, pad)), logits, weights, top_i, residual

    def example_inputs(self, m: int, device: torch.device | str, seed: int = 0) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator(device=device).manual_seed(seed)
        return _randn(gen, m, self.c.hidden, device=device), _randn(gen, m, self.c.hidden, device=device)


TINY = {
    "deepseek": DeepSeekCfg(hidden=256, q_lora=128, kv_lora=128, rope=32, heads=2, qk_nope=64, v_head=64, inter=128),
    "llama": LlamaCfg(hidden=256, heads=4, kv_heads=2, head_dim=64, inter=384),
    "qwen3next": QwenCfg(heads=2, head_dim=128, hidden=128),
    "gptoss": GptOssCfg(hidden=180, experts=16),
}

BLOCKS: dict[str, Callable[..., Block]] = {
    "deepseek": lambda tiny=False, residual="vllm", **_: DeepSeekV3Layer(
        TINY["deepseek"] if tiny else DeepSeekCfg(), residual),
    "llama": lambda tiny=False, residual="vllm", llama_quant="token", **_: LlamaFp8Layer(
        TINY["llama"] if tiny else LlamaCfg(), residual, llama_quant),
    "qwen3next": lambda tiny=False, **_: Qwen3NextGatedOut(TINY["qwen3next"] if tiny else QwenCfg()),
    "gptoss": lambda tiny=False, residual="vllm", **_: GptOssRouterPad(TINY["gptoss"] if tiny else GptOssCfg(),
                                                                          residual),
}
BLOCKS |= {f"{name}_vllm": functools.partial(lambda native, **kw: use_vllm_ops(native(**kw)), BLOCKS[name])
           for name in ("deepseek", "gptoss")}
"""name -> builder(tiny=False, residual="vllm", llama_quant="token") of a block with uninitialised weights
(``init_weights`` fills them); ``<name>_vllm``: the block in vLLM's ops (``use_vllm_ops``)."""


def build(name: str, device: torch.device | str, tiny: bool = False, gemm: str = "dispatch", **options: str) -> Block:
    """Block ``name`` with its weights initialised and quantised, on ``device``, in eval mode; ``gemm``: its
    fp8 GEMM (a ``GEMMS`` name or ``"inline"``, ``Linear.gemm``)."""
    if gemm not in (*GEMMS, "inline"):
        raise ValueError(f"unknown gemm {gemm!r}: one of {', '.join((*GEMMS, 'inline'))}")
    block = BLOCKS[name](tiny=tiny, **options)
    init_weights(block)
    for m in block.modules():
        if isinstance(m, Linear):
            m.gemm = gemm
            m.quantize()
    return block.to(device).eval()


DECODER_LAYERS = ("deepseek", "llama")  # blocks that are a whole decoder layer: (hidden, residual) -> the same


class Stack(nn.Module):
    """A model of ``n`` layers of block ``name`` (one of ``DECODER_LAYERS``), each built as ``build`` builds
    it, each layer's ``(out, residual)`` the next one's ``(hidden, residual)``: what ``torch.compile(model)``
    sees of a model, in one graph."""

    def __init__(self, name: str, n: int, device: torch.device | str, tiny: bool = False) -> None:
        super().__init__()
        if name not in DECODER_LAYERS or n < 1:
            raise ValueError(f"a stack is n >= 1 layers of one of {DECODER_LAYERS}, got {n} of {name!r}")
        self.layers = nn.ModuleList([build(name, device, tiny) for _ in range(n)])

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for layer in self.layers:
            hidden, residual = layer(hidden, residual)
        return hidden, residual

    def example_inputs(self, m: int, device: torch.device | str, seed: int = 0) -> tuple[torch.Tensor, ...]:
        return self.layers[0].example_inputs(m, device, seed)
