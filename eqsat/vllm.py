"""``VllmEqSatPass``: :class:`~eqsat.EqSatPass` as vLLM's ``InductorPass`` (vLLM asserts the type).

    from vllm.config import CompilationConfig
    from eqsat.vllm import VllmEqSatPass
    config = CompilationConfig(inductor_compile_config={"post_grad_custom_post_pass": VllmEqSatPass()})

Importing this module imports vLLM (seconds); everything else in ``eqsat`` works without it.
See ``docs/vllm.md`` for the configuration and which of vLLM's own fusion passes to turn off.
"""

from __future__ import annotations

from vllm.compilation.passes.inductor_pass import InductorPass

from eqsat.pass_ import EqSatPass


class VllmEqSatPass(EqSatPass, InductorPass):
    """The optimizer as a vLLM post-grad pass: ``__call__``, ``uuid()``, ``is_applicable_for_range``."""
