"""Prices per GPU-hour, from ``--price-per-gpu-hour`` flags or a ``--pricing`` file.

``--price-per-gpu-hour 2.50`` prices every model; ``--price-per-gpu-hour "NVIDIA H100 80GB
HBM3=3.10"`` prices one model and may be repeated; both together give per-model prices with a
default. A price is per whole GPU-hour, so a MIG slice costs its fraction of it.

A pricing file (``exporter.report.pricingfile`` reads it) adds what flags cannot say: prices per
node pool, per MIG profile (per instance-hour, as clouds list them), on-prem amortisation
(purchase price over years), an energy price per kWh of measured energy, and a cloud list-price
data file. ``PriceSheet.gpu_hour_price`` is the one place that decides which applies, in this
order: the node pool's price for the model, the pool's default, the model's price, the model's
on-prem amortisation, the list-price file, the default. A MIG instance with a profile price pays
that per instance-hour instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True)
class NodePool:
    """Prices of the GPUs on one node pool (``default`` for models it does not list)."""

    name: str
    default: float | None = None
    per_model: Mapping[str, float] = field(default_factory=dict)
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class OnPrem:
    """A GPU bought outright: its purchase price spread evenly over ``years`` of hours."""

    purchase_price: float
    years: float

    @property
    def per_hour(self) -> float:
        return self.purchase_price / (self.years * HOURS_PER_YEAR)


@dataclass(frozen=True)
class PriceSheet:
    default: float | None = None
    per_model: Mapping[str, float] = field(default_factory=dict)
    currency: str | None = None
    mig_profiles: Mapping[str, float] = field(default_factory=dict)
    pool_label: str | None = None
    pools: tuple[NodePool, ...] = ()
    on_prem: Mapping[str, OnPrem] = field(default_factory=dict)
    list_prices: Mapping[str, float] = field(default_factory=dict)
    energy_per_kwh: float | None = None
    source: str | None = None  # the pricing file, printed in the report's header

    @property
    def empty(self) -> bool:
        return (self.default is None and not self.per_model and not self.pools and not self.on_prem
                and not self.list_prices and not self.mig_profiles)

    def price(self, model: str) -> float | None:
        """The whole-GPU hourly price of ``model`` outside any node pool."""
        return self.gpu_hour_price(model, None)

    def pool(self, name: str | None) -> NodePool | None:
        return next((pool for pool in self.pools if pool.name == name), None) if name else None

    def gpu_hour_price(self, model: str, pool_name: str | None) -> float | None:
        """The whole-GPU hourly price of ``model`` on ``pool_name`` (see the module docstring for the order)."""
        pool = self.pool(pool_name)
        if pool is not None:
            if model in pool.per_model:
                return pool.per_model[model]
            if pool.default is not None:
                return pool.default
        if model in self.per_model:
            return self.per_model[model]
        if model in self.on_prem:
            return self.on_prem[model].per_hour
        if model in self.list_prices:
            return self.list_prices[model]
        return self.default

    def instance_hour_price(self, profile: str) -> float | None:
        """The price of one hour of a MIG instance of ``profile``, when the sheet lists one."""
        return self.mig_profiles.get(profile) if profile else None

    def pool_of_node(self, node: str) -> str | None:
        """The pool listing ``node`` by name in the pricing file (node labels are looked up elsewhere)."""
        return next((pool.name for pool in self.pools if node in pool.nodes), None)


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
