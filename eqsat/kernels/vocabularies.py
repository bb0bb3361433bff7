"""The built-in vocabularies: vLLM 0.33.0's ops, the project's own ``eqsat`` namespace and the ATen/prims
ops lift rules read (``aten``), gathered from the kernel families (each family says how every vocabulary spells its rows)."""

from __future__ import annotations

from eqsat.core.spelling import Spelling, VocabIndex, Vocabulary
from eqsat.kernels.catalog import FAMILIES

VOCABULARY_NAMES = ("vllm", "eqsat", "aten")


def _gather(name: str) -> tuple[Spelling, ...]:
    return tuple(s for family in FAMILIES for s in getattr(family, "SPELLINGS", {}).get(name, ()))


DEFAULT_VOCABULARIES = tuple(Vocabulary(name, _gather(name)) for name in VOCABULARY_NAMES)
VLLM, OWN, ATEN = DEFAULT_VOCABULARIES


def default_index() -> VocabIndex:
    return VocabIndex(DEFAULT_VOCABULARIES)
