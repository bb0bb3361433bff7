"""eqsat: an equality-saturation optimizer for PyTorch FX graphs that picks kernels.

``optimize(gm)`` rewrites a post-grad FX graph in place so that the cheapest equivalent graph under a
cost model of real kernels runs (e.g. rms_norm + fp8 group quant as one fused AITER kernel) and
returns a :class:`Report`. ``EqSatPass`` is the same as a drop-in Inductor / vLLM post-grad pass.
"""

from eqsat import ops as _ops  # noqa: F401  (registers the eqsat:: torch.library ops)
from eqsat.api import optimize
from eqsat.errors import EqSatInputError, EqSatInternalError
from eqsat.kernels.catalog import DEFAULT_CATALOG, Catalog
from eqsat.kernels.spec import KernelSpec
from eqsat.options import Options
from eqsat.pass_ import EqSatPass
from eqsat.report import Report
from eqsat.saturate import Budgets

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_CATALOG", "Budgets", "Catalog", "EqSatInputError", "EqSatInternalError", "EqSatPass", "KernelSpec",
    "Options", "Report", "optimize",
]
