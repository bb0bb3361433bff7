"""eqsat: an equality-saturation optimizer for PyTorch FX graphs that picks kernels.

``optimize(gm)`` rewrites a post-grad FX graph in place so that the cheapest equivalent graph under a
cost model of real kernels runs (e.g. rms_norm + fp8 group quant as one fused AITER kernel) and
returns a :class:`Report`. ``EqSatPass`` is the same as a drop-in Inductor / vLLM post-grad pass.
"""

# ruff: noqa: E402  (the package path is extended before the submodules are imported)
import os as _os

# ``rewrites/`` and ``extract/`` sit at the repository's top level and install as ``eqsat.rewrites`` and
# ``eqsat.extract`` (pyproject's package-dir); a source checkout on the path finds them the same way
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if all(_os.path.isfile(_os.path.join(_root, d, "__init__.py")) for d in ("rewrites", "extract")) \
        and _root not in __path__:
    __path__.append(_root)

from eqsat.api import optimize
from eqsat.core.errors import EqSatInputError, EqSatInternalError
from eqsat.core.spec import KernelSpec
from eqsat.engine.saturate import Budgets
from eqsat.kernels.catalog import DEFAULT_CATALOG, Catalog
from eqsat.kernels.torch_ops import register_eqsat_ops, register_vllm_standins
from eqsat.options import Options
from eqsat.pass_ import EqSatPass
from eqsat.report import Report

register_eqsat_ops()  # the eqsat:: torch.library ops, defined once per process

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_CATALOG", "Budgets", "Catalog", "EqSatInputError", "EqSatInternalError", "EqSatPass", "KernelSpec",
    "Options", "Report", "optimize", "register_vllm_standins",
]
