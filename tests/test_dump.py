"""EQSAT_DUMP_DIR: per graph, the code before and after, the report, and e-graph pictures."""

from __future__ import annotations

import torch

import eqsat
from tests.conftest import rand, trace

vllm, vir = torch.ops.vllm, torch.ops.vllm_ir


def test_dump_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("EQSAT_DUMP_DIR", str(tmp_path))
    gm = trace(lambda x, w: vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128), rand(8, 256), rand(256))
    report = eqsat.optimize(gm, strict=True)
    assert report.changed
    (folder,) = tmp_path.iterdir()
    files = {p.name for p in folder.iterdir()}
    assert {"before.py", "after.py", "report.txt", "report.json", "egraph.dot"} <= files
    assert "rms_norm" in (folder / "before.py").read_text()
    assert "rocm_aiter_rmsnorm_fp8_group_quant" in (folder / "after.py").read_text()
    (fusion,) = [f for f in files if f.startswith("fusion_") and f.endswith(".dot")]
    dot = (folder / fusion).read_text()
    assert "K_rmsnorm_fp8_group_quant" in dot and "QuantGroup" in dot and "fillcolor" in dot
    assert dot.startswith("digraph")


def test_no_dump_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("EQSAT_DUMP_DIR", raising=False)
    gm = trace(lambda x, w: vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128), rand(8, 256), rand(256))
    eqsat.optimize(gm, strict=True)
    assert not any(tmp_path.iterdir())
