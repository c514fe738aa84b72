"""``--pricing FILE``: the report's prices as a YAML file, read like every other input file.

The file goes through ``exporter.inputfile`` (a regular file, bounded, UTF-8) and
``exporter.safeyaml`` (bounded nesting, no aliases, standard tags, errors that never quote the
file); every mistake is one ``PricingFileError`` naming the file, the line and the key, which
the command line turns into exit status 2. The schema (docs/cost.md, "The pricing file";
example: etc/pricing.example.yaml)::

    currency: EUR
    default: 2.00                      # per whole-GPU hour, any model not priced below
    models: {MODEL: PRICE}             # per whole-GPU hour, by the modelName label
    migProfiles: {PROFILE: PRICE}      # per MIG instance-hour, by GPU_I_PROFILE
    nodePools:
      label: cloud.google.com/gke-nodepool   # node label (kube-state-metrics' kube_node_labels)
      pools:
        POOL: {default: PRICE, models: {MODEL: PRICE}, nodes: [NODE, ...]}
    onPrem: {MODEL: {purchasePrice: 25000, years: 4}}
    energy: {pricePerKWh: 0.25}
    cloudListPrices: list-prices.csv   # CSV "model,price_per_gpu_hour", relative to this file

Nothing is fetched: list prices are a file the user keeps (from the provider's price sheet).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from exporter import safeyaml
from exporter.inputfile import InputFileError, read_text
from exporter.report.pricing import NodePool, OnPrem, PriceSheet
from exporter.safeyaml import YamlValue

TOP_KEYS = ("currency", "default", "models", "migProfiles", "nodePools", "onPrem", "energy", "cloudListPrices")
LIST_PRICE_COLUMNS = ("model", "price_per_gpu_hour")


class PricingFileError(ValueError):
    """A mistake in the pricing file: ``str()`` is ``FILE:LINE: KEY: what is wrong``."""


def _price(value: YamlValue) -> float:
    raw = value.value()
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or raw < 0:
        raise value.error("expected a non-negative number")
    return float(raw)


def _positive(value: YamlValue) -> float:
    price = _price(value)
    if price <= 0:
        raise value.error("expected a number above 0")
    return price


def _text(value: YamlValue) -> str:
    raw = value.value()
    if not isinstance(raw, str) or not raw.strip():
        raise value.error("expected a non-empty string")
    return raw.strip()


def _prices(value: YamlValue) -> dict[str, float]:
    return {name: _price(item) for name, item in value.mapping().items()}


def load_pricing(path: str) -> PriceSheet:
    """The price sheet of the file at ``path``; raises ``PricingFileError`` (file, line, key)."""
    root = safeyaml.YamlFile(path, safeyaml.located(PricingFileError)).load("pricing")
    if root is None:
        raise PricingFileError(f"{path}: the file is empty; see docs/cost.md for the pricing file's keys")
    fields: dict[str, Any] = {}
    for name, value in root.mapping(TOP_KEYS).items():
        if name == "currency":
            fields["currency"] = _text(value)
        elif name == "default":
            fields["default"] = _price(value)
        elif name == "models":
            fields["per_model"] = _prices(value)
        elif name == "migProfiles":
            fields["mig_profiles"] = _prices(value)
        elif name == "nodePools":
            fields["pool_label"], fields["pools"] = _node_pools(value)
        elif name == "onPrem":
            fields["on_prem"] = _on_prem(value)
        elif name == "energy":
            for item in value.mapping(("pricePerKWh",)).values():
                fields["energy_per_kwh"] = _price(item)
        elif name == "cloudListPrices":
            fields["list_prices"] = _list_prices(value)
    sheet = PriceSheet(source=path, **fields)
    if sheet.empty and sheet.energy_per_kwh is None:
        raise PricingFileError(f"{path}: no price in the file (give default, models, migProfiles, nodePools, "
                               "onPrem, cloudListPrices or energy)")
    return sheet


def _node_pools(value: YamlValue) -> tuple[str | None, tuple[NodePool, ...]]:
    entries = value.mapping(("label", "pools"))
    label = _text(entries["label"]) if "label" in entries else None
    pools: list[NodePool] = []
    for pool_name, pool in (entries["pools"].mapping() if "pools" in entries else {}).items():
        items = pool.mapping(("default", "models", "nodes"))
        default = _price(items["default"]) if "default" in items else None
        per_model = _prices(items["models"]) if "models" in items else {}
        nodes: tuple[str, ...] = ()
        if "nodes" in items:
            listed = items["nodes"].value()
            if not isinstance(listed, list) or not all(isinstance(n, str) and n for n in listed):
                raise items["nodes"].error("expected a list of node names")
            nodes = tuple(listed)
        if default is None and not per_model:
            raise pool.error("a pool needs a default price or models")
        pools.append(NodePool(pool_name, default, per_model, nodes))
    if pools and label is None and not any(pool.nodes for pool in pools):
        raise value.error("give the node label that names the pool, or nodes: per pool", path="nodePools.label")
    return label, tuple(pools)


def _on_prem(value: YamlValue) -> dict[str, OnPrem]:
    result = {}
    for model, item in value.mapping().items():
        entries = item.mapping(("purchasePrice", "years"))
        for needed in ("purchasePrice", "years"):
            if needed not in entries:
                raise item.error("missing (give purchasePrice and years)", path=f"{item.path}.{needed}")
        result[model] = OnPrem(_price(entries["purchasePrice"]), _positive(entries["years"]))
    return result


def _list_prices(value: YamlValue) -> dict[str, float]:
    """The user's list-price CSV (``model,price_per_gpu_hour``), relative to the pricing file."""
    name = _text(value)
    path = Path(name) if Path(name).is_absolute() else Path(value.source).parent / name
    try:
        text = read_text(path)
    except InputFileError as exc:
        raise value.error(f"{path}: {exc}") from None
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    if header is None or tuple(cell.strip() for cell in header) != LIST_PRICE_COLUMNS:
        raise PricingFileError(f"{path}:1: header: expected the columns {','.join(LIST_PRICE_COLUMNS)}")
    prices: dict[str, float] = {}
    for number, row in enumerate(rows, start=2):
        if not row or not any(cell.strip() for cell in row):
            continue
        if len(row) != 2 or not row[0].strip():
            raise PricingFileError(f"{path}:{number}: model: expected two cells, a model and a price")
        model = row[0].strip()
        try:
            price = float(row[1])
        except ValueError:
            price = -1.0
        if not math.isfinite(price) or price < 0:
            raise PricingFileError(f"{path}:{number}: price_per_gpu_hour: expected a non-negative number")
        if model in prices:
            raise PricingFileError(f"{path}:{number}: model: listed twice")
        prices[model] = price
    return prices
