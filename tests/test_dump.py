"""EQSAT_DUMP_DIR: per graph, the code, saved graph and pictures before and after, the report, and
e-graph pictures."""

from __future__ import annotations

import logging

import torch

import eqsat
from eqsat import graphfile
from eqsat.fx import picture as fx_picture
from tests.conftest import rand, targets, trace

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
    """No dump is opened, and nothing is written where the pass runs (a relative default would land there)."""
    from eqsat import dump

    monkeypatch.delenv("EQSAT_DUMP_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    opened: list[object] = []
    monkeypatch.setattr(dump, "opened", lambda *args: opened.append(args))
    gm = trace(lambda x, w: vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128), rand(8, 256), rand(256))
    assert eqsat.optimize(gm, strict=True).changed
    assert not opened and not any(tmp_path.iterdir())


def norm_quant(x, w):
    return vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128)


def test_dump_saves_the_input_graph_and_draws_the_fx_graph_before_and_after(tmp_path):
    gm = trace(norm_quant, rand(8, 256), rand(256))
    want = targets(gm)
    eqsat.optimize(gm, strict=True, dump_dir=str(tmp_path))
    (folder,) = tmp_path.iterdir()
    files = {p.name for p in folder.iterdir()}
    assert {"before.json", "before.dot", "after.dot", "before.png", "after.png"} <= files
    loaded = graphfile.load(folder / "before.json")
    assert targets(loaded) == want
    assert eqsat.optimize(loaded, strict=True).kernels_chosen == {"K_rmsnorm_fp8_group_quant": 1}
    before, after = (folder / "before.dot").read_text(), (folder / "after.dot").read_text()
    assert "vllm_ir.rms_norm\\nbf16[s" in before and "#fd8d3c" not in before
    fused = [line for line in after.splitlines() if "rocm_aiter_rmsnorm_fp8_group_quant" in line]
    assert len(fused) == 1 and "#fd8d3c" in fused[0] and "fp8e4m3fnuz[s" in fused[0]
    assert (folder / "after.png").read_bytes().startswith(b"\x89PNG")


def test_fx_pictures_of_large_graphs_are_skipped_with_a_note(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(fx_picture, "PNG_MAX_NODES", 3)
    with caplog.at_level(logging.INFO, logger="eqsat"):
        eqsat.optimize(trace(norm_quant, rand(8, 256), rand(256)), strict=True, dump_dir=str(tmp_path))
    (folder,) = tmp_path.iterdir()
    assert (folder / "after.dot").exists() and not (folder / "after.png").exists()
    assert "after.png not drawn" in caplog.text


def test_a_graph_that_cannot_be_saved_still_optimizes(tmp_path, caplog):
    gm = trace(norm_quant, rand(8, 256), rand(256))
    with gm.graph.inserting_before(gm.graph.output_node()):
        gm.graph.call_function(print, ())  # not an op a saved graph can hold
    report = eqsat.optimize(gm, strict=True, dump_dir=str(tmp_path))
    assert report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 1}
    (folder,) = tmp_path.iterdir()
    assert not (folder / "before.json").exists() and (folder / "after.py").exists()
    assert "could not dump the saved graph" in caplog.text


def test_a_dump_folder_that_cannot_be_made_still_optimizes(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the dump folder should go")
    report = eqsat.optimize(trace(norm_quant, rand(8, 256), rand(256)), strict=True, dump_dir=str(blocker))
    assert report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 1}
    assert "could not dump to" in caplog.text


def test_layers_put_each_node_below_its_inputs():
    gm = trace(norm_quant, rand(8, 256), rand(256))
    rows = {n: k for k, row in enumerate(fx_picture.layers(gm.graph)) for n in row}
    assert len(rows) == len(gm.graph.nodes)
    assert all(rows[a] < rows[n] for n in gm.graph.nodes for a in n.all_input_nodes)
