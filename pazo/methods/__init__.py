"""Training methods by name: one interface (`Method.step`) for zeroth- and first-order methods.

Laid out like the papers: `two_point.py` (the private two-point estimate), `zeroth_order.py`
(MeZO, DPZero, DP-ZO, DP-ZOGD), `pazo_m.py` / `pazo_p.py` / `pazo_s.py` (Algorithms 1-3) and
`first_order.py` (SGD, DP-SGD, DPMD, DOPE-SGD, GEP). Importing this package registers them, in the
order of the paper's tables (first-order, then zeroth-order without and with public data), then
every other module of this package (a new method's). The directions and engines the zeroth-order
methods use live below them, in `pazo.zo`.
"""
from __future__ import annotations

import importlib
import pkgutil

from pazo.methods import first_order, zeroth_order, pazo_m, pazo_p, pazo_s  # noqa: F401, I001  (registers, in order)
from pazo.methods.base import Method, MethodConfig, MethodContext
from pazo.methods.registry import (METHODS, MethodInfo, build_method, method_config, method_info,
                                   method_names)

for _module in pkgutil.iter_modules(__path__):   # any other module here registers after them: a new
    importlib.import_module(f"{__name__}.{_module.name}")   # method needs its module and its yaml alone

__all__ = ["METHODS", "Method", "MethodConfig", "MethodContext", "MethodInfo", "build_method",
           "method_config", "method_info", "method_names"]
