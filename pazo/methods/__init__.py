"""Training methods by name: one interface (`Method.step`) for zeroth- and first-order methods."""
from __future__ import annotations

from pazo.methods.base import Method, MethodContext, Release
from pazo.methods.first_order import DOPESGD, DPMD, DPSGD, GEP, SGD
from pazo.methods.select import PazoS
from pazo.methods.zeroth_order import DPZO, DPZero, HybridZOGD, MeZO, PazoM, PazoP, PazoPNormalized
from pazo.registry import Registry

METHODS: Registry = Registry("method")
for _name, _cls in {"mezo": MeZO, "dpzero": DPZero, "pazo_m": PazoM, "pazo_p": PazoP,
                    "pazo_p_prime": PazoPNormalized, "pazo_s": PazoS,
                    "dp_zo": DPZO, "dp_zogd": HybridZOGD,
                    "sgd": SGD, "dpsgd": DPSGD, "dpmd": DPMD, "dope_sgd": DOPESGD, "gep": GEP}.items():
    METHODS.register(_name)(_cls)


def method_class(name: str) -> type[Method]:
    return METHODS.get(name)


__all__ = ["METHODS", "Method", "MethodContext", "Release", "method_class"]
