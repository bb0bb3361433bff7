"""check_equiv: true positives, true negatives with counterexamples, and honest "not proven"."""

from __future__ import annotations

import torch

from eqsat.tools.equiv import check_equiv
from tests.conftest import rand, trace

vllm, vir = torch.ops.vllm, torch.ops.vllm_ir
X, W = rand(8, 512), rand(512)


def reference(x, w):
    return vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128)


def native_norm(x, w):
    return _native(x, w, 1e-6, gemma=False)


def _native(x, w, eps, gemma):
    x32 = x.float()
    y = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(w.dtype)
    return y * (1 + w) if gemma else y * w


def statuses(a, b, numerics="rounding", inputs=(X, W)):
    return [v.status for v in check_equiv(trace(a, *inputs), trace(b, *inputs), numerics=numerics)]


def test_hand_fused_aiter_op_equals_reference_under_rounding():
    fused = lambda x, w: vllm.rocm_aiter_rmsnorm_fp8_group_quant(x, w, 1e-6, 128)  # noqa: E731
    assert statuses(reference, fused) == ["equal", "equal"]


def test_hand_fused_is_not_bit_exact():
    fused = lambda x, w: vllm.rocm_aiter_rmsnorm_fp8_group_quant(x, w, 1e-6, 128)  # noqa: E731
    assert "different" in statuses(reference, fused, numerics="exact")


def test_native_chain_equals_the_ir_op_exactly():
    assert statuses(lambda x, w: vir.rms_norm(x, w, 1e-6), native_norm, numerics="exact") == ["equal"]


def test_gemma_norm_is_different():
    assert statuses(native_norm, lambda x, w: _native(x, w, 1e-6, gemma=True)) == ["different"]


def test_wrong_eps_is_different():
    assert statuses(lambda x, w: vir.rms_norm(x, w, 1e-6), lambda x, w: vir.rms_norm(x, w, 0.5)) == ["different"]


def test_equal_but_unprovable_is_not_proven():
    """x * 2 and x + x agree on every input, but no rule states it: never reported as different."""
    assert statuses(lambda x, w: x * 2, lambda x, w: x + x, numerics="exact") == ["not proven"]


def test_cli_check_equiv(tmp_path, capsys):
    from eqsat.tools import cli

    src = tmp_path / "models.py"
    src.write_text(
        "import torch\n"
        "import eqsat\n"
        "from eqsat.kernels.torch_ops import register_vllm_standins\n"
        "register_vllm_standins()\n"
        "def reference(x, w):\n"
        "    return torch.ops.vllm.rocm_aiter_group_fp8_quant(torch.ops.vllm_ir.rms_norm(x, w, 1e-6), 128)\n"
        "def fused(x, w):\n"
        "    return torch.ops.vllm.rocm_aiter_rmsnorm_fp8_group_quant(x, w, 1e-6, 128)\n"
        "def wrong(x, w):\n"
        "    return torch.ops.vllm.rocm_aiter_rmsnorm_fp8_group_quant(x, w * 2, 1e-6, 128)\n"
        "def example_inputs():\n"
        "    return torch.randn(8, 512).bfloat16(), torch.randn(512).bfloat16()\n")
    assert cli.main(["check-equiv", f"{src}:reference", f"{src}:fused"]) == 0
    assert "equal" in capsys.readouterr().out
    assert cli.main(["check-equiv", f"{src}:reference", f"{src}:wrong", "--json"]) == 1
    assert '"different"' in capsys.readouterr().out


def test_graphs_that_cannot_run_here_are_not_proven_and_say_why():
    """An op with no kernel on this machine (as a saved graph's opaque stand-ins are): the search for
    a counterexample cannot run, so an unproven output stays "not proven", with the reason."""
    lib = torch.library.Library("eqsat_equiv_test", "DEF")  # a throwaway library, kept alive by `lib`
    lib.define("nokernel(Tensor x) -> Tensor")
    lib.impl("nokernel", lambda x: (_ for _ in ()).throw(RuntimeError("no kernel here")), "CPU")
    lib.impl("nokernel", lambda x: torch.empty_like(x), "Meta")
    op = torch.ops.eqsat_equiv_test.nokernel
    verdicts = check_equiv(trace(lambda x: op(x).abs(), X), trace(lambda x: op(x).neg().abs(), X))
    assert [v.status for v in verdicts] == ["not proven"]
    assert "could not run" in verdicts[0].detail and "no kernel here" in verdicts[0].detail


def test_opaque_values_of_the_two_graphs_stay_apart():
    """Two unknown ops, each the only op of its graph (so at the same node index): neither graph's
    value is the other's, whatever index it has."""
    lib = torch.library.Library("eqsat_equiv_opaque", "DEF")  # kept alive by `lib`
    for name, fn in (("a", torch.abs), ("b", torch.neg)):
        lib.define(f"{name}(Tensor x) -> Tensor")
        lib.impl(name, fn, "CPU")
        lib.impl(name, lambda x: torch.empty_like(x), "Meta")
    ops = torch.ops.eqsat_equiv_opaque
    assert [v.status for v in check_equiv(trace(ops.a, X), trace(ops.b, X))] == ["different"]
    assert [v.status for v in check_equiv(trace(ops.a, X), trace(ops.a, X))] == ["not proven"]  # opaque: could be random


def test_an_input_returned_as_it_is_is_that_input():
    assert statuses(lambda x, w: (x, w), lambda x, w: (x, w)) == ["equal", "equal"]
    assert statuses(lambda x, w: x, lambda x, w: x.neg()) == ["different"]


def hf_llama_chain(x, w):
    """HF ``LlamaRMSNorm`` (weight first) feeding vLLM's native group quant (e4m3fn, 448)."""
    fmax, fp8 = 448.0, torch.float8_e4m3fn
    x32 = x.float()
    y = w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
    yg = y.reshape(-1, y.shape[-1] // 128, 128)
    s = (yg.abs().max(dim=-1, keepdim=True)[0].float() / fmax).clamp(min=1 / (fmax * 512))
    return (yg / s).clamp(-fmax, fmax).to(fp8).reshape(y.shape), s.squeeze(-1)


def test_hf_chain_equals_the_fused_kernel_under_rounding():
    fused = lambda x, w: torch.ops.eqsat.rmsnorm_fp8_group_quant(x, w, 1e-6, 128, torch.float8_e4m3fn)  # noqa: E731
    assert statuses(hf_llama_chain, fused) == ["equal", "equal"]


def test_trials_compare_a_quant_as_q_times_scale():
    """A hand-fused chain no rule proves (the norm kept in fp32, AITER's amax floor) moves the scale by
    the bf16 rounding the contract allows: not proven, never a false "different"; a wrong eps is."""
    def hand_fused(x, w, eps):
        x32 = x.float()
        yg = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w.float()).reshape(-1, 4, 128)
        s = yg.abs().amax(-1, keepdim=True).clamp_min(1e-10) / 448.0
        return (yg * (1 / s)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).reshape(x.shape), s.squeeze(-1)

    assert statuses(hf_llama_chain, lambda x, w: hand_fused(x, w, 1e-6)) == ["not proven", "not proven"]
    assert statuses(hf_llama_chain, lambda x, w: hand_fused(x, w, 0.5)) == ["different", "different"]
