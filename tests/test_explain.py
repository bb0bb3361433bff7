"""explain / what-if / discover: sites with verdicts and reasons, hypothetical kernels, uncovered chains."""

from __future__ import annotations

import torch
import torch.fx as fx

from eqsat.core.spec import KernelSpec, Operand, Traffic, params
from eqsat.options import Options
from eqsat.tools import cli
from eqsat.tools.explain import as_json, discover, explain
from tests.conftest import rand, trace

vllm, vir = torch.ops.vllm, torch.ops.vllm_ir


def two_norms(x, r, w, w16):
    n, res = vir.fused_add_rms_norm(x, r, w, 1e-6)
    q, s = vllm.rocm_aiter_group_fp8_quant(n, 128)
    q2, s2 = vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w16, 1e-6), 128)
    return q, s, res, q2, s2


def graph():
    return trace(two_norms, rand(8, 512), rand(8, 512, seed=1), rand(512), rand(512, dtype=torch.float16))


def by_kernel(sites):
    return {s.kernel: s for s in sites}


def test_explain_names_the_failed_constraint_and_the_chosen_kernel():
    sites = by_kernel(explain(graph()))
    assert sites["K_rmsnorm_add_fp8_group_quant"].status == "chosen"
    assert sites["K_rmsnorm_fp8_group_quant"].status == "constraint failed"
    assert sites["K_rmsnorm_fp8_group_quant"].failed_constraint == "(= (dtype x) (dtype w))"
    loser = sites["I_add_rms_group_quant"]
    assert loser.status == "not chosen" and loser.kernel_us > loser.chosen_us
    assert '"status": "chosen"' in as_json(list(sites.values()))


def _what_if_traffic(a):
    x = a["x"]
    assert isinstance(x, Operand)
    return Traffic(x.bytes / 4, x.bytes / 4)  # a hypothetical kernel that moves a quarter of the bytes


WHAT_IF = KernelSpec("K_what_if_rms_bf16_out", params("x:T w:T eps:f64"), _what_if_traffic,
                     outputs=("(RmsNorm x w eps)",), numerics="exact")


def test_hypothetical_kernel_shows_where_it_applies_and_what_it_saves():
    options = Options(catalog=Options().catalog.extend([WHAT_IF]))
    gm = trace(lambda x, w: vir.rms_norm(x, w, 1e-6) * 2, rand(8, 512), rand(512))
    site = by_kernel(explain(gm, options))["K_what_if_rms_bf16_out"]
    assert site.status == "chosen" and site.kernel_us < 10


def test_discover_ranks_uncovered_chains():
    def f(x, w):
        y = (x.float() * 2 + 1).exp().to(torch.bfloat16)
        return vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128), y

    chains = discover(trace(f, rand(8, 512), rand(512)))
    assert chains and chains[0].saving_us > 0 and len(chains[0].ops) >= 4
    assert all(a.saving_us >= b.saving_us for a, b in zip(chains, chains[1:], strict=False))


def test_cli_explain(tmp_path, capsys):
    src = tmp_path / "m.py"
    src.write_text(
        "import torch\nimport eqsat\nfrom eqsat.kernels.torch_ops import register_vllm_standins\n"
        "register_vllm_standins()\n"
        "def layer(x, w):\n"
        "    y = (x.float() * 2 + 1).exp().to(torch.bfloat16)\n"
        "    return torch.ops.vllm.rocm_aiter_group_fp8_quant(torch.ops.vllm_ir.rms_norm(x, w, 1e-6), 128), y\n"
        "def example_inputs():\n    return torch.randn(8, 512).bfloat16(), torch.randn(512).bfloat16()\n")
    assert cli.main(["explain", f"{src}:layer", "--discover"]) == 0
    out = capsys.readouterr().out
    assert "K_rmsnorm_fp8_group_quant" in out and "chosen" in out and "chain" in out


def test_sites_name_their_source_relative_to_the_working_directory(tmp_path, monkeypatch):
    from eqsat.tools.explain import _source
    monkeypatch.chdir(tmp_path)
    g = fx.Graph()
    a, b, c = (g.placeholder(n) for n in "abc")
    a.meta["stack_trace"] = f'  File "{tmp_path}/models/llama.py", line 12, in forward\n    y = norm(x)\n'
    b.meta["stack_trace"] = '  File "/elsewhere/lib.py", line 3, in helper\n    return f(x)\n'
    c.meta["stack_trace"] = a.meta["stack_trace"]  # named once
    assert _source([a, b, c]) == ["models/llama.py:12 (forward)", "/elsewhere/lib.py:3 (helper)"]


def test_explain_names_what_the_op_that_would_run_it_requires():
    """The fuse rule holds, but vLLM's CK rmsnorm + per-token quant holds one row of at most 8192
    columns: explain says so (and the pass leaves the site alone)."""
    def f(x, w):
        return vllm.rocm_aiter_per_token_quant(vir.rms_norm(x, w, 1e-6), torch.float8_e4m3fnuz)

    site = by_kernel(explain(trace(f, rand(4, 16384), rand(16384))))["K_rmsnorm_fused_dynamic_quant"]
    assert site.status == "constraint failed"
    assert "vllm::rocm_aiter_rmsnorm_fused_dynamic_quant needs the last dim of x is at most 8192" in site.failed_constraint


def _dynamic_graph(symbolic: str):
    """``torch.compile(dynamic=True)`` with the weight an input: the hidden dim is a symbol of its own."""
    import eqsat

    captured = {}

    class Grab(eqsat.EqSatPass):
        def __call__(self, graph):
            from eqsat.fx.capture import copy_graph
            captured["gm"] = copy_graph(graph)
            super().__call__(graph)

    def f(x, w):
        return vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128)

    torch._dynamo.reset()
    p = Grab(symbolic=symbolic)
    with torch._inductor.config.patch(post_grad_custom_post_pass=p, fx_graph_cache=False):
        torch.compile(f, dynamic=True)(rand(16, 1536), rand(1536))
    return captured["gm"], p.last_report


def test_dynamic_true_fuses_under_a_guard_on_the_hidden_dim():
    gm, report = _dynamic_graph("guard")
    assert report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 1}
    assert len(report.guards) == 1 and report.guards[0].endswith(", 1536)")


def test_dynamic_true_under_prove_is_explained():
    gm, report = _dynamic_graph("prove")
    assert not report.kernels_chosen
    site = by_kernel(explain(gm, symbolic="prove"))["K_rmsnorm_fp8_group_quant"]
    assert site.status == "constraint failed" and "symbolic" in site.failed_constraint
    assert by_kernel(explain(gm))["K_rmsnorm_fp8_group_quant"].status == "chosen"


def test_discover_reports_gemmas_norm_and_native_quant_as_one_chain():
    """No kernel covers Gemma's ``(1 + w)`` norm (its own semantic op, lifted); the norm and the lifted
    native quant are one region, so a kernel author sees one chain, not three fragments."""
    from tests.test_lift import FN, gemma, quant_native

    chains = discover(trace(lambda x, w: quant_native(gemma(x, w), 128, 448.0, fp8=FN), rand(8, 512), rand(512)))
    assert len(chains) == 1 and {"RmsNormOnePlus", "QuantGroup"} <= set(chains[0].ops), chains
    assert chains[0].saving_us > 0


def test_explain_lists_the_lifted_hf_chain_site():
    from tests.test_equiv import hf_llama_chain

    site = by_kernel(explain(trace(hf_llama_chain, rand(8, 512), rand(512))))["K_rmsnorm_fp8_group_quant"]
    assert site.status == "chosen" and site.kernel_us > 0


def test_discover_reports_no_chain_that_saves_nothing():
    """Splits of splits are memory-bound ops that cost nothing apart: no kernel would make them faster."""
    def f(x):
        a, b = x.split(256, -1)
        c, d = a.split(128, -1)
        return c.abs(), d.abs(), b.abs()

    assert all(ch.saving_us > 0 for ch in discover(trace(f, rand(8, 512))))
