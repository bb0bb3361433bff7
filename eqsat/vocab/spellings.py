"""The built-in vocabularies: vLLM 0.33.0's ops and the project's own ``eqsat`` namespace.

vLLM schemas are those of ``reference/vllm-facts.md`` §3.1; the fp8 dtype of vLLM's AITER ops is the
platform's and is read off the op's output. The ``eqsat`` ops take it as an argument.
"""

from __future__ import annotations

from eqsat.vocab.base import Spelling, VocabIndex, Vocabulary

VLLM = Vocabulary("vllm", (
    Spelling("RmsNorm", "vllm_ir::rms_norm", ("x", "w", "eps")),
    Spelling("AddRmsNorm", "vllm_ir::fused_add_rms_norm", ("x", "r", "w", "eps")),
    Spelling("QuantGroup", "vllm::rocm_aiter_group_fp8_quant", ("x", "G"), from_output_dtype=("dt",)),
    Spelling("K_rmsnorm_fp8_group_quant", "vllm::rocm_aiter_rmsnorm_fp8_group_quant",
             ("x", "w", "eps", "G"), from_output_dtype=("dt",)),
    Spelling("K_rmsnorm_add_fp8_group_quant", "vllm::rocm_aiter_rmsnorm_with_add_fp8_group_quant",
             ("x", "r", "w", "eps", "G"), from_output_dtype=("dt",)),
))

OWN = Vocabulary("eqsat", (
    Spelling("RmsNorm", "eqsat::rms_norm", ("x", "w", "eps")),
    Spelling("AddRmsNorm", "eqsat::fused_add_rms_norm", ("x", "r", "w", "eps")),
    Spelling("QuantGroup", "eqsat::group_fp8_quant", ("x", "G", "dt")),
    Spelling("K_rmsnorm_fp8_group_quant", "eqsat::rmsnorm_fp8_group_quant", ("x", "w", "eps", "G", "dt")),
    Spelling("K_rmsnorm_add_fp8_group_quant", "eqsat::rmsnorm_add_fp8_group_quant",
             ("x", "r", "w", "eps", "G", "dt")),
))

DEFAULT_VOCABULARIES = (VLLM, OWN)


def default_index() -> VocabIndex:
    return VocabIndex(DEFAULT_VOCABULARIES)
