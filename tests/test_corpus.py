"""The CI part of the third-party corpus (``tests/fixtures/corpus``): each positive fuses into its
kernel within the rounding contract, each look-alike stays bit-exact (``benchmarks.corpus_check``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.corpus_check import check_case, compare

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
CASES = json.loads((CORPUS / "cases.json").read_text())


@pytest.mark.parametrize("stem", sorted(CASES))
def test_corpus_case(stem):
    outcome = check_case(CORPUS, stem, CASES[stem])
    assert outcome.passed, outcome.detail


def test_the_ci_part_holds_positives_and_look_alikes_of_both_fp8_dtypes():
    kinds = {(meta["fp8"], meta["kernel"] is None) for meta in CASES.values()}
    assert kinds == {(fp8, look) for fp8 in ("e4m3fn", "e4m3fnuz") for look in (False, True)}


def test_a_look_alike_check_sees_one_flipped_byte():
    import torch

    q = torch.zeros(2, 128, dtype=torch.float8_e4m3fn)
    flipped = q.clone()
    flipped.view(torch.uint8)[0, 0] = 1
    assert compare([q], [q], exact=True) == "" and compare([flipped], [q], exact=True) == "output 0 differs"
