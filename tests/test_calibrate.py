"""Calibration: the fitter recovers known kernel lines, and the CLI writes a profile and a plot."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

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
    twin's chain is timed alone (its outputs the graph's), as its ``traffic`` prices it; a row with
    ``Twin.quant_epilogue`` has a ``traffic_into_op`` of one launch and one read of its inputs more, what
    Inductor makes of the chain when a GEMM reads its quant."""
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
        alone = spec.traffic(args)
        assert alone.bytes == cases.min_bytes(key, m, n, g), key
        if is_twin(spec):
            assert cases.EXPECTED_LAUNCHES[key] == alone.launches, key
            epilogue = rows[key.removeprefix("inductor:")].inductor.quant_epilogue
            assert (spec.traffic_into_op is not None) == epilogue, key
            if spec.traffic_into_op is not None:
                into = spec.traffic_into_op(args)
                inputs = sum(v.bytes for v in args.values() if isinstance(v, Operand))
                assert (into.launches, into.bytes) == (alone.launches + 1, alone.bytes + inputs), key
    triton = {k for k, s in rows.items() if "triton" in s.platforms}
    wanted = triton | {f"inductor:{k}" for k in triton if rows[k].inductor is not None}
    assert wanted <= set(cases.KEYS), sorted(wanted - set(cases.KEYS))


def test_fit_recovers_a_row_term_and_a_line_past_l2():
    """A key timed at several row widths on both sides of the device's L2 gets a per-row term and a line of
    its own past L2 (AITER's persistent norms); a key timed at one width gets no row term (rows and bytes
    are then one unknown), and one timed past L2 too few times keeps one line."""
    walk = KernelTiming(2.0, 6000.0, 0.002, past_l2=KernelTiming(2.5, 4000.0, 0.005))
    truth = Profile("truth", 1.0, 1.0, kernels={"walk": walk, "flat": KernelTiming(1.0, 3000.0)}, l2_bytes=4e7)
    out = []
    for n in (1536, 2880, 7168):
        for m in (1, 64, 256, 1024, 4096, 8192):
            for key in ("walk",) if n != 2880 else ("walk", "flat"):
                t = Traffic(8.0 * m * n, 0, 1, m)
                out.append(Measurement((Component(key, t.bytes, 1, m),), truth.time_us(t, key)))
    fitted = fit(out, Profile("base", 4000.0, 1.5, l2_bytes=4e7))
    got = fitted.kernels["walk"]
    assert got.row_us == pytest.approx(walk.row_us, rel=1e-3) and got.past_l2 is not None
    assert got.past_l2.row_us == pytest.approx(0.005, rel=1e-3)
    assert got.past_l2.bandwidth_gbps == pytest.approx(4000.0, rel=1e-3)
    flat = fitted.kernels["flat"]
    assert flat.row_us == 0.0 and flat.past_l2 is None  # one width; two calls past 40 MB
    assert evaluate(out, fitted).max_rel_error < 1e-3
    again = Profile.from_json(fitted.to_json())
    assert again.kernels == fitted.kernels and again.l2_bytes == 4e7


def test_a_line_past_l2_prices_only_calls_moving_more():
    prof = Profile("p", 4000.0, 1.5, l2_bytes=4e7,
                   kernels={"k": KernelTiming(2.0, 8000.0, past_l2=KernelTiming(2.0, 2000.0))})
    assert prof.time_us(Traffic(3e7, 0), "k") == pytest.approx(2.0 + 3e7 / 8e6)
    assert prof.time_us(Traffic(5e7, 0), "k") == pytest.approx(2.0 + 5e7 / 2e6)
    assert Profile("q", 4000.0, 1.5, kernels=prof.kernels).time_us(Traffic(5e7, 0), "k") == pytest.approx(2.0 + 5e7 / 8e6)


@pytest.mark.parametrize("key", ["add_rms_norm", "rms_norm"])
def test_h200_prices_aiters_persistent_norms_as_measured_past_l2(key):
    """AITER's Triton rms_norm and rmsnorm2d_fwd_with_add run one program per SM, each walking its rows:
    on the H200 the add + norm at M = 4096 runs 1.45 TB/s at N = 1536 and 2.93 at 7168. The h200 profile's
    lines (a per-row term, a line past L2) price every measured call moving more than 40 MB within 10%,
    where one latency + bandwidth line was 44-49% under at N = 1536: the calls they were fitted on, and
    those of an independent run of the same kernels (``h200_calibration_run2.csv``)."""
    from eqsat.cost.calibrate import read_table

    h200 = load_profile("h200")
    rows = [m for m in read_table("benchmarks/results/h200_calibration.csv",
                                  "benchmarks/results/h200_calibration_add_rms_norm.csv",
                                  "benchmarks/results/h200_calibration_run2.csv")
            if m.components[0].key == key and h200.beyond_l2(m.components[0].bytes)]
    assert len(rows) >= 12
    for m in rows:
        assert abs(m.predict(h200) - m.us) / m.us < 0.10, (m.label, m.us, m.predict(h200))


def test_the_cost_model_walks_a_row_kernels_rows():
    """An e-node of a row-wise catalog kernel is priced with the rows of its first tensor operand: AITER's
    add + norm at M = 4096, N = 2880 on the H200, measured 48.5 µs, and at M = 1024 (in L2), 8.4."""
    from eqsat.core.egraph import EGraph, ENode, Ref, TensorFacts
    from eqsat.cost.roofline import RooflineCost
    from eqsat.options import Options

    x, w = TensorFacts("bfloat16", ("s0", 2880)), TensorFacts("bfloat16", (2880,))
    add = ENode("AddRmsNorm", (Ref(0), Ref(1), Ref(2), 1e-6), 3)
    eg = EGraph.from_nodes([ENode("Leaf", (0,), 0), ENode("Leaf", (1,), 1), ENode("Leaf", (2,), 2), add], [3],
                           {0: x, 1: x, 2: w})
    h200 = load_profile("h200")
    for m, measured in ((4096, 48.55), (1024, 8.44)):
        traffic, key = RooflineCost(eg, Options().catalog, h200, m).traffic(add, m)  # type: ignore[misc]
        assert traffic.rows == m and key == "add_rms_norm"
        assert RooflineCost(eg, Options().catalog, h200, m)(add) == pytest.approx(measured, rel=0.08)


def test_lines_a_table_lacks_are_moved_by_the_measured_keys_median_ratio():
    """A table of another card measuring some keys: the base's other lines keep their latency and row
    term, their bandwidths scaled by the measured keys' median ratio in each regime (past L2 where both
    have a line), and the default bandwidth as the lines past L2."""
    from eqsat.cost.calibrate import move_unmeasured

    past = KernelTiming(1.0, 1000.0)
    base = Profile("old", 4000.0, 1.5, l2_bytes=4e7, kernels={
        "a": KernelTiming(1.5, 3000.0, past_l2=past), "b": KernelTiming(4.0, 1200.0), "c": KernelTiming(2.0, 2000.0),
        "d": KernelTiming(3.0, 500.0, 0.01, past_l2=KernelTiming(2.5, 400.0))})
    fitted = replace(base, kernels={**base.kernels, "a": KernelTiming(1.4, 1500.0, past_l2=KernelTiming(1.0, 800.0)),
                                    "b": KernelTiming(4.0, 1080.0), "new": KernelTiming(1.0, 9.0)})
    moved, how = move_unmeasured(base, fitted, {"a", "b", "new"})
    assert how.within_l2 == pytest.approx((0.5 + 0.9) / 2) and how.past_l2 == pytest.approx(0.8)
    assert how.keys == ("c", "d")
    assert moved.kernels["a"] == fitted.kernels["a"] and moved.kernels["new"] == fitted.kernels["new"]
    assert moved.kernels["c"] == KernelTiming(2.0, 2000.0 * 0.7)
    assert moved.kernels["d"] == KernelTiming(3.0, 500.0 * 0.7, 0.01, past_l2=KernelTiming(2.5, 400.0 * 0.8))
    assert moved.bandwidth_gbps == pytest.approx(4000.0 * 0.8) and moved.launch_us == 1.5
    with pytest.raises(ValueError, match="nothing says how lines move"):
        move_unmeasured(base, fitted, {"new"})


H100_TABLES = tuple(f"benchmarks/results/h100_calibration{t}.csv" for t in ("", "_pad", "_hinted", "_dynamic_pad", "_heads"))


def test_the_shipped_h100_profile_is_its_tables_fit_every_line_measured(tmp_path):
    """``h100.json`` is what its description's command writes: the H100 tables' fit on the h200 profile
    (its defaults and L2 boundary), every line measured on an H100 (none moved from the H200's), and the
    probe-log tables are what ``benchmarks.probe_tables`` reads off the logs."""
    from benchmarks.probe_tables import tables

    h100 = load_profile("h100")
    desc = h100.description
    out = tmp_path / "h100.json"
    assert cli.main(["calibrate", *H100_TABLES, "--device", "h200", "--name", "h100", "--description", desc,
                     "--out", str(out)]) == 0
    again = load_profile(str(out))
    assert again.name == "h100" and again.platform == "triton"
    assert set(again.kernels) == set(h100.kernels) == set(load_profile("h200").kernels)
    for key, line in h100.kernels.items():
        for got, want in ((again.kernels[key], line), (again.kernels[key].past_l2, line.past_l2)):
            assert (got is None) == (want is None), key
            if got is not None:
                assert got.launch_us == pytest.approx(want.launch_us, rel=1e-9, abs=1e-12), key
                assert got.bandwidth_gbps == pytest.approx(want.bandwidth_gbps, rel=1e-9), key
                assert got.row_us == pytest.approx(want.row_us, rel=1e-9, abs=1e-15), key
    assert again.bandwidth_gbps == pytest.approx(h100.bandwidth_gbps, rel=1e-9)
    assert {m.components[0].key for m in read_table(*H100_TABLES)} == set(h100.kernels)
    for path in H100_TABLES:
        with open(path, newline="") as fh:
            assert {row["device"] for row in csv.DictReader(fh)} == {"h100"}, path
        assert path.removeprefix("benchmarks/results/") in desc
    for name, rows in tables("h100").items():
        with open(f"benchmarks/results/{name}", newline="") as fh:
            assert [tuple(r) for r in csv.reader(fh)][1:] == [tuple(map(str, r)) for r in rows], name
    assert "moved" not in desc and "estimates" not in desc


@pytest.mark.parametrize("gpu, want", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
                                       ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI355X", "mi355x")])
def test_auto_is_the_profile_measured_on_the_gpu_torch_sees(monkeypatch, gpu, want):
    import torch

    from eqsat import EqSatPass
    from eqsat.cost.cards import gpu_profile_name

    assert gpu_profile_name(gpu) == want
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: gpu)
    assert load_profile("auto") is load_profile(want)
    p = EqSatPass(profile="auto")
    assert p.options.profile == want  # resolved once: the options and uuid name the card's profile
    assert p.uuid() == EqSatPass(profile=want).uuid()


def test_auto_without_a_known_gpu_is_a_clear_error(monkeypatch):
    import torch

    from eqsat import EqSatPass
    from eqsat.cost.cards import gpu_profile_name

    with pytest.raises(ValueError, match="no shipped profile was measured on a 'NVIDIA A100"):
        gpu_profile_name("NVIDIA A100-SXM4-80GB")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="needs a GPU torch can see"):
        EqSatPass(profile="auto")
