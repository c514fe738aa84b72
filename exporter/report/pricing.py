"""Prices per GPU-hour: one for every model, or one per ``modelName`` (as the exporter labels it).

``--price-per-gpu-hour 2.50`` prices every model; ``--price-per-gpu-hour "NVIDIA H100 80GB
HBM3=3.10"`` prices one model and may be repeated; both together give per-model prices with a
default. A price is per whole GPU-hour, so a MIG slice costs its fraction of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PriceSheet:
    default: float | None = None
    per_model: Mapping[str, float] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.default is None and not self.per_model

    def price(self, model: str) -> float | None:
        return self.per_model.get(model, self.default)


def _amount(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: the price must be a non-negative number, got {text!r}")
    return value


def parse_prices(values: Iterable[str]) -> PriceSheet:
    """Parse ``--price-per-gpu-hour`` values; ValueError names the bad value."""
    default: float | None = None
    per_model: dict[str, float] = {}
    for value in values:
        where = f"--price-per-gpu-hour {value!r}"
        if "=" in value:
            model, _, amount = value.rpartition("=")
            if not model.strip():
                raise ValueError(f"{where}: give the model before '=' (its modelName label)")
            per_model[model.strip()] = _amount(amount.strip(), where)
        else:
            if default is not None:
                raise ValueError(f"{where}: a price for every model was already given")
            default = _amount(value.strip(), where)
    return PriceSheet(default, per_model)
