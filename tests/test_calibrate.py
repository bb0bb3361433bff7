"""Calibration: the fitter recovers known kernel lines, and the CLI writes a profile and a plot."""

from __future__ import annotations

import csv
import json

import pytest

from eqsat.core.spec import Operand, Traffic
from eqsat.cost.calibrate import Component, Measurement, evaluate, fit, read_table
from eqsat.cost.roofline import KernelTiming, Profile, load_profile
from eqsat.tools import cli

TRUTH = {"a": KernelTiming(1.5, 3000.0), "b": KernelTiming(4.0, 1200.0)}


def synthetic(truth: dict[str, KernelTiming]) -> list[Measurement]:
    prof = Profile("truth", 1.0, 1.0, kernels=truth)
    out = []
    for key in truth:
        for nbytes in (1e3, 1e5, 1e6, 1e7, 1e8):
            c = Component(key, nbytes)
            out.append(Measurement((c,), prof.time_us(Traffic(nbytes, 0), key)))
    both = (Component("a", 5e6), Component("b", 5e6))  # a composite row: two kernels back to back
    out.append(Measurement(both, sum(prof.time_us(Traffic(c.bytes, 0), c.key) for c in both)))
    return out


def test_fit_recovers_kernel_lines():
    profile = fit(synthetic(TRUTH), load_profile("h200"))
    for key, want in TRUTH.items():
        assert profile.kernels[key].launch_us == pytest.approx(want.launch_us, rel=1e-3)
        assert profile.kernels[key].bandwidth_gbps == pytest.approx(want.bandwidth_gbps, rel=1e-3)
    quality = evaluate(synthetic(TRUTH), profile)
    assert quality.median_rel_error < 1e-6 and quality.spearman > 0.99


def test_cli_calibrate_writes_profile_and_plot(tmp_path, capsys):
    table = tmp_path / "t.csv"
    with open(table, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["key", "M", "N", "G", "dtype", "device", "us", "bytes", "launches", "check"])
        for m in synthetic(TRUTH)[:-1]:
            w.writerow([m.components[0].key, 1, 1, 128, "bf16", "h200", m.us, m.components[0].bytes, 1, "ok"])
        w.writerow(["a", 1, 1, 128, "bf16", "h200", 999.0, 1e3, 1, "fail"])  # a failed check is skipped
    assert len(read_table(table)) == 10
    out_json, out_png = tmp_path / "p.json", tmp_path / "p.png"
    assert cli.main(["calibrate", str(table), "--device", "h200", "--out", str(out_json), "--plot", str(out_png)]) == 0
    assert "Spearman" in capsys.readouterr().out
    fitted = load_profile(str(out_json))
    assert fitted.kernels["b"].launch_us == pytest.approx(4.0, rel=1e-3)
    assert json.loads(out_json.read_text())["name"] == "h200"
    assert out_png.read_bytes()[:4] == b"\x89PNG"


def test_unknown_profile_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown device profile"):
        load_profile("tpu-v9")


def test_calibration_cases_move_the_bytes_the_cost_model_prices(monkeypatch):
    """``benchmarks/gpu/calibration_cases.py`` times every fused row that runs on Triton (the H200's
    kernels) and its Inductor twin: each key's measured bytes are its row's traffic (a fitted bandwidth
    prices the bytes the model counts), and a twin's launches when the profiler fails are its row's. A
    twin's chain is timed alone (its outputs the graph's): a row with ``Twin.quant_epilogue`` prices one
    launch and one read of its inputs more, what Inductor makes of the chain when a GEMM reads its quant."""
    import torch

    from eqsat.kernels.catalog import DEFAULT_CATALOG
    from eqsat.kernels.inductor import is_twin

    monkeypatch.syspath_prepend("benchmarks/gpu")
    import calibration_cases as cases

    rows = {s.calibration_key: s for s in DEFAULT_CATALOG if s.is_fused}
    m, g = 64, 128
    for key in cases.KEYS:
        if key not in rows:
            continue  # an unfused part: an AITER kernel of its own (rms_norm writes rsigma), or eager silu_mul
        spec, n = rows[key], cases.widths(key, [4096])[0]
        bf16 = {"x": (m, 2 * n) if "silu" in key else (m, n), "r": (m, n), "w": (n,), "s": (1,), "q": (m, n),
                "kv": (m, cases.MLA_KV), "qw": (n,), "kvw": (cases.MLA_KV,)}
        args = {p: Operand(bf16[p], 4 if p == "s" else 2) if sort == "T" else
                {"G": g, "mult": cases.PAD_MULTIPLE, "dt": torch.float8_e4m3fn}.get(p, 1e-6) for p, sort in spec.params}
        priced = spec.traffic(args)
        alone = spec.traffic.traffic(args) if getattr(spec.traffic, "reread", False) else priced
        assert alone.bytes == cases.min_bytes(key, m, n, g), key
        if is_twin(spec):
            epilogue = rows[key.removeprefix("inductor:")].inductor.quant_epilogue
            assert cases.EXPECTED_LAUNCHES[key] + epilogue == priced.launches, key
            inputs = sum(v.bytes for v in args.values() if isinstance(v, Operand))
            assert priced.bytes == alone.bytes + (inputs if epilogue else 0), key
    triton = {k for k, s in rows.items() if "triton" in s.platforms}
    wanted = triton | {f"inductor:{k}" for k in triton if rows[k].inductor is not None}
    assert wanted <= set(cases.KEYS), sorted(wanted - set(cases.KEYS))
