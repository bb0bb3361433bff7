"""Building the third-party corpus: code the project did not write, traced to ATen and saved.

``python -m benchmarks.corpus OUT --vllm-wheel vllm-0.33.0-....whl`` (needs ``transformers``; the wheel
from ``pip download vllm==0.33.0 --no-deps``, read as a zip, never imported) builds every case of
``CASES`` for each fp8 dtype and tracer and writes ``OUT/cases.json``, ``OUT/<stem>.json`` and
``OUT/<stem>.pt`` in the layout ``benchmarks.corpus_check`` reads (``--ci DIR``: also the part CI checks,
``CI_STEMS``); then it checks them and prints the table. A case is a block of a Hugging Face model family (its norm or MLP module, built from the
family's config class at tiny sizes: no weights are downloaded) feeding vLLM 0.33's native
``QuantFP8`` code (group, per-token) or vLLM's native ``SiluAndMul`` feeding it, with the kernel it
must fuse into, or none: a look-alike that must stay bit-exact.

vLLM's functions are taken from the wheel's source as written (``ast``), and run with the bounds
``get_fp8_min_max`` gives on each platform: 448 for e4m3fn (CUDA, gfx950), 224 for e4m3fnuz (ROCm).
Tracers: ``make_fx`` (``aten.silu`` kept), ``core_aten`` (``core_aten_decompositions``) and
``inductor`` (the graph ``torch.compile`` hands a post-grad pass, captured by that pass).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import json
import sys
import types
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch._decomp import core_aten_decompositions

from benchmarks.corpus_check import check_corpus, render
from eqsat import graphfile
from eqsat.fx.capture import copy_graph, trace_tokens

FP8 = {"e4m3fn": (torch.float8_e4m3fn, 448.0), "e4m3fnuz": (torch.float8_e4m3fnuz, 224.0)}
"""fp8 dtype -> (dtype, the bound vLLM's ``get_fp8_min_max`` gives on its platform)."""
TOKENS, HIDDEN, GROUP = 16, 256, 128
_QUANT_FILE = "vllm/model_executor/layers/quantization/input_quant_fp8.py"
_UTILS_FILE = "vllm/model_executor/layers/quantization/utils/quant_utils.py"
_ACT_FILE = "vllm/model_executor/layers/activation.py"


# -- vLLM's native code, from the wheel ----------------------------------------------------------------

def _nodes(source: str, keep: Callable[[ast.stmt], bool]) -> list[ast.stmt]:
    return [n for n in ast.parse(source).body if keep(n)]


def _method(source: str, cls: str, name: str, rename: str = "") -> ast.FunctionDef:
    """``cls.name`` as a plain function (decorators dropped), named ``rename`` if given."""
    klass = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name)
    fn.decorator_list, fn.name = [], rename or name
    return fn


def _exec(nodes: list[ast.stmt], namespace: dict[str, Any]) -> dict[str, Any]:
    exec(compile(ast.Module(body=nodes, type_ignores=[]), "<vllm wheel>", "exec"), namespace)  # noqa: S102
    return namespace


@dataclasses.dataclass(frozen=True)
class VllmNative:
    """vLLM's native quant and activation code for one fp8 platform, as functions of tensors."""

    group: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    token: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
    silu_and_mul: Callable[[torch.Tensor], torch.Tensor]


def load_vllm(wheel: Path, fp8: str) -> VllmNative:
    dtype, fmax = FP8[fp8]
    with zipfile.ZipFile(wheel) as z:
        quant, utils, act = (z.read(f).decode() for f in (_QUANT_FILE, _UTILS_FILE, _ACT_FILE))
    names = {"_GroupShape", "GroupShape", "group_broadcast", "prep_scale_for_group_broadcast"}
    shapes = _nodes(utils, lambda n: getattr(n, "name", None) in names or (
        isinstance(n, ast.Assign) and ast.unparse(n.targets[0]).startswith("GroupShape.")))
    module = types.ModuleType(f"vllm_wheel_{fp8}")  # a module of its own: dynamo resolves globals by name
    sys.modules[module.__name__] = module
    vars(module).update(torch=torch, NamedTuple=NamedTuple, ClassVar=ClassVar)
    ns = _exec(shapes, vars(module))
    ns.update(F=F, _FP8_DTYPE=dtype, _FP8_MIN=-fmax, _FP8_MAX=fmax, _FP8_MIN_SCALING_FACTOR=1.0 / (fmax * 512.0))
    _exec([_method(quant, "QuantFP8", "_quantize_group_native"), _method(quant, "QuantFP8", "forward_native"),
           _method(act, "SiluAndMul", "forward_native", "silu_and_mul_native")], ns)
    shape = ns["GroupShape"]

    # the QuantFP8 instances' attributes these methods read, made outside the traced code
    groups = {u: SimpleNamespace(group_size=GROUP, use_ue8m0=u, column_major_scales=False) for u in (False, True)}
    per_token = SimpleNamespace(is_group_quant=False, static=False, group_shape=shape.PER_TOKEN, num_token_padding=None)

    def group(x: torch.Tensor, ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        return ns["_quantize_group_native"](groups[ue8m0], x)

    def token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ns["forward_native"](per_token, x)

    return VllmNative(group, token, ns["silu_and_mul_native"])


# -- the cases -------------------------------------------------------------------------------------------

def hf(family: str, cls: str) -> Any:
    return getattr(importlib.import_module(f"transformers.models.{family}.modeling_{family}"), cls)


def hf_config(family: str) -> Any:
    module = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
    cls = next(v for k, v in vars(module).items() if k.endswith("Config") and isinstance(v, type)
               and v.__module__ == module.__name__)
    return cls(hidden_size=HIDDEN, **CONFIG_EXTRA.get(family, {}))


CONFIG_EXTRA = {"mamba2": {"num_heads": 8, "head_dim": 64}}
"""What a tiny config needs beyond ``hidden_size`` to validate (Mamba-2: heads * head_dim = 2 * hidden)."""


def _eps(config: Any) -> float:
    return float(getattr(config, "rms_norm_eps", None) or getattr(config, "layer_norm_epsilon", 1e-6))


def norm_block(family: str, cls: str, quant: str = "group", weight: torch.dtype = torch.bfloat16,
               hidden: int = HIDDEN) -> Callable[[VllmNative], tuple[Callable[..., Any], list[torch.Tensor]]]:
    """``family``'s RMSNorm (eps from its config) feeding vLLM's native quant: f(x, w) -> (q, s)."""
    def build(v: VllmNative):
        norm = hf(family, cls)(hidden, eps=_eps(hf_config(family))).to(weight)
        q = {"group": v.group, "token": v.token, "ue8m0": lambda y: v.group(y, ue8m0=True)}[quant]

        def f(x, w):
            return q(torch.func.functional_call(norm, {"weight": w}, (x,)))

        w = (torch.randn(hidden, generator=torch.Generator().manual_seed(1)) * 0.5 + 1).to(weight)
        return f, [_x(hidden), w]
    return build


def silu_block(source: str) -> Callable[[VllmNative], tuple[Callable[..., Any], list[torch.Tensor]]]:
    """An activation feeding vLLM's native group quant: vLLM's ``SiluAndMul``; Phi-3's MLP (one gate_up
    projection, chunked: the projection left out, x is its output); Llama's MLP (split gate / up)."""
    def build(v: VllmNative):
        if source == "vllm":
            return (lambda x: v.group(v.silu_and_mul(x))), [_x(2 * HIDDEN)]
        if source == "phi3":  # Phi3MLP.forward itself, its projections an identity and the quant
            mlp = hf("phi3", "Phi3MLP")(hf_config("phi3"))
            mlp.gate_up_proj, mlp.down_proj = torch.nn.Identity(), Quant(v.group)
            return mlp, [_x(2 * HIDDEN)]
        act = hf("llama", "LlamaMLP")(hf_config("llama")).act_fn
        return (lambda g, u: v.group(act(g) * u)), [_x(HIDDEN), _x(HIDDEN, seed=2)]
    return build


class Quant(torch.nn.Module):
    """A projection replaced by the quant an fp8 linear applies to its input: its output is (q, s)."""

    def __init__(self, quant: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]) -> None:
        super().__init__()
        self.quant = quant

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.quant(x)


def _x(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(TOKENS, n, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


RMS_Q, RMS_TOKEN, SILU_Q = "K_rmsnorm_fp8_group_quant", "K_rmsnorm_fused_dynamic_quant", "K_silu_mul_fp8_group_quant"
POSITIVE_NORMS = (("llama", "LlamaRMSNorm"), ("mistral", "MistralRMSNorm"), ("qwen2", "Qwen2RMSNorm"),
                  ("qwen3", "Qwen3RMSNorm"), ("deepseek_v3", "DeepseekV3RMSNorm"), ("olmo2", "Olmo2RMSNorm"),
                  ("phi3", "Phi3RMSNorm"), ("granite", "GraniteRMSNorm"), ("smollm3", "SmolLM3RMSNorm"),
                  ("glm4", "Glm4RMSNorm"), ("helium", "HeliumRMSNorm"), ("mamba2", "Mamba2RMSNorm"))
CASES: dict[str, tuple[str, Callable[[VllmNative], Any], str | None]] = {
    **{f"{fam}-norm-group-quant": (fam, norm_block(fam, cls), RMS_Q) for fam, cls in POSITIVE_NORMS},
    "llama-norm-token-quant": ("llama", norm_block("llama", "LlamaRMSNorm", "token"), RMS_TOKEN),
    "qwen3-norm-token-quant": ("qwen3", norm_block("qwen3", "Qwen3RMSNorm", "token"), RMS_TOKEN),
    "vllm-silu-and-mul-group-quant": ("vllm", silu_block("vllm"), SILU_Q),
    "phi3-mlp-act-group-quant": ("phi3", silu_block("phi3"), SILU_Q),
    # look-alikes: what no kernel computes, whatever it resembles
    "gemma-norm-group-quant": ("gemma", norm_block("gemma", "GemmaRMSNorm"), None),
    "gemma3-norm-group-quant": ("gemma3", norm_block("gemma3", "Gemma3RMSNorm"), None),
    "qwen3_next-norm-group-quant": ("qwen3_next", norm_block("qwen3_next", "Qwen3NextRMSNorm"), None),
    "llama-fp32-weight-norm-group-quant": ("llama", norm_block("llama", "LlamaRMSNorm", weight=torch.float32), None),
    "llama-norm-ue8m0-group-quant": ("llama", norm_block("llama", "LlamaRMSNorm", "ue8m0"), None),
    "llama-norm-padded-group-quant": ("llama", norm_block("llama", "LlamaRMSNorm", hidden=200), None),
    "llama-mlp-split-gate-up-group-quant": ("llama", silu_block("llama"), None),
}
"""name -> (family, builder, the kernel it must fuse into or None)."""


# -- tracing and saving ------------------------------------------------------------------------------

def trace_inductor(f: Callable[..., Any], inputs: list[torch.Tensor]) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    """The post-grad graph ``torch.compile(dynamic=False)`` hands a custom post pass, and ``inputs`` in
    its placeholders' order (dynamo may put a weight first), matched by shape and dtype where unique."""
    import torch._inductor.config as inductor_config

    seen: list[torch.fx.GraphModule] = []
    torch._dynamo.reset()
    with inductor_config.patch(post_grad_custom_post_pass=lambda g: seen.append(copy_graph(g))):
        torch.compile(f, dynamic=False, fullgraph=True)(*inputs)
    gm = seen[-1]
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    key = [(tuple(t.shape), t.dtype) for t in inputs]
    if len(set(key)) < len(key):
        return gm, inputs
    return gm, [inputs[key.index((tuple(v.shape), v.dtype))] for v in vals]


def trace_make_fx(decompositions: Any = None) -> Callable[..., tuple[torch.fx.GraphModule, list[torch.Tensor]]]:
    return lambda f, inputs: (trace_tokens(f, *inputs, decompositions=decompositions), inputs)


TRACERS: dict[str, Callable[[Callable[..., Any], list[torch.Tensor]], tuple[torch.fx.GraphModule, list[torch.Tensor]]]] = {
    "make_fx": trace_make_fx(), "core_aten": trace_make_fx(core_aten_decompositions()), "inductor": trace_inductor}


CI_STEMS = ("llama-norm-group-quant.inductor.e4m3fn", "olmo2-norm-group-quant.make_fx.e4m3fnuz",
            "qwen3-norm-token-quant.make_fx.e4m3fn", "vllm-silu-and-mul-group-quant.core_aten.e4m3fn",
            "phi3-mlp-act-group-quant.inductor.e4m3fnuz", "gemma3-norm-group-quant.inductor.e4m3fn",
            "llama-norm-ue8m0-group-quant.inductor.e4m3fnuz", "llama-mlp-split-gate-up-group-quant.make_fx.e4m3fn")
"""The part of the corpus ``tests/test_corpus.py`` checks in CI (``--ci DIR`` copies it there)."""


def copy_ci(corpus: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cases = json.loads((corpus / "cases.json").read_text())
    for stem in CI_STEMS:
        for ext in ("json", "pt"):
            (dest / f"{stem}.{ext}").write_bytes((corpus / f"{stem}.{ext}").read_bytes())
    kept = {stem: cases[stem] for stem in CI_STEMS}
    (dest / "cases.json").write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")


def build(out: Path, wheel: Path, names: list[str] | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cases: dict[str, dict[str, object]] = {}
    for fp8 in FP8:
        native = load_vllm(wheel, fp8)
        for name, (family, builder, kernel) in CASES.items():
            if names and name not in names:
                continue
            f, inputs = builder(native)
            reference = f(*inputs)
            for tracer, trace in TRACERS.items():
                stem = f"{name}.{tracer}.{fp8}"
                gm, ordered = trace(f, inputs)
                graphfile.save(gm, out / f"{stem}.json")
                torch.save({"inputs": ordered, "reference": list(reference)}, out / f"{stem}.pt")
                cases[stem] = {"case": name, "family": family, "tracer": tracer, "fp8": fp8, "kernel": kernel}
    (out / "cases.json").write_text(json.dumps(cases, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--vllm-wheel", type=Path, required=True)
    parser.add_argument("--case", action="append", help="build only these cases (repeatable)")
    parser.add_argument("--ci", type=Path, help="also copy the CI part (CI_STEMS) to this directory")
    args = parser.parse_args()
    build(args.out, args.vllm_wheel, args.case)
    if args.ci:
        copy_ci(args.out, args.ci)
    print(render(check_corpus(args.out)))
