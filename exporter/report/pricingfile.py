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

import yaml

from exporter import safeyaml
from exporter.inputfile import InputFileError, read_text
from exporter.report.pricing import NodePool, OnPrem, PriceSheet

TOP_KEYS = ("currency", "default", "models", "migProfiles", "nodePools", "onPrem", "energy", "cloudListPrices")
LIST_PRICE_COLUMNS = ("model", "price_per_gpu_hour")


class PricingFileError(ValueError):
    """A mistake in the pricing file: ``str()`` is ``FILE:LINE: KEY: what is wrong``."""


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, node: yaml.Node | None, key: str, message: str) -> PricingFileError:
        line = f":{node.start_mark.line + 1}" if node is not None else ""
        return PricingFileError(f"{self.path}{line}: {key}: {message}")

    def mapping(self, node: yaml.Node, key: str, allowed: tuple[str, ...] | None = None) -> list[
            tuple[str, yaml.Node, yaml.Node]]:
        """The (key, key node, value node) entries of a mapping, refusing duplicates and unknown keys."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, key, "expected a mapping (key: value)")
        entries: list[tuple[str, yaml.Node, yaml.Node]] = []
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail(key_node, key, "keys must be plain strings")
            name = str(key_node.value)
            where = f"{key}.{name}" if key else name
            if allowed is not None and name not in allowed:
                raise self.fail(key_node, where, safeyaml.unknown_key(name, allowed))
            if name in seen:
                raise self.fail(key_node, where, "duplicate key")
            seen.add(name)
            entries.append((name, key_node, value_node))
        return entries

    def value(self, node: yaml.Node, key: str) -> Any:
        try:
            return safeyaml.construct(node)
        except safeyaml.YamlInputError as exc:
            raise self.fail(node, key, exc.message) from None

    def price(self, node: yaml.Node, key: str) -> float:
        value = self.value(node, key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise self.fail(node, key, "expected a non-negative number")
        return float(value)

    def positive(self, node: yaml.Node, key: str) -> float:
        value = self.price(node, key)
        if value <= 0:
            raise self.fail(node, key, "expected a number above 0")
        return value

    def text(self, node: yaml.Node, key: str) -> str:
        value = self.value(node, key)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(node, key, "expected a non-empty string")
        return value.strip()

    def prices(self, node: yaml.Node, key: str) -> dict[str, float]:
        return {name: self.price(value, f"{key}.{name}") for name, _, value in self.mapping(node, key)}


def load_pricing(path: str) -> PriceSheet:
    """The price sheet of the file at ``path``; raises ``PricingFileError`` (file, line, key)."""
    reader = _Reader(path)
    try:
        text = read_text(path)
    except InputFileError as exc:
        raise PricingFileError(f"{path}: {exc}") from None
    try:
        root = safeyaml.compose(text)
    except safeyaml.YamlInputError as exc:
        raise PricingFileError(f"{path}{f':{exc.line}' if exc.line else ''}: {exc.message}") from None
    if root is None:
        raise PricingFileError(f"{path}: the file is empty; see docs/cost.md for the pricing file's keys")
    fields: dict[str, Any] = {}
    for name, _, value in reader.mapping(root, "", TOP_KEYS):
        if name == "currency":
            fields["currency"] = reader.text(value, name)
        elif name == "default":
            fields["default"] = reader.price(value, name)
        elif name == "models":
            fields["per_model"] = reader.prices(value, name)
        elif name == "migProfiles":
            fields["mig_profiles"] = reader.prices(value, name)
        elif name == "nodePools":
            fields["pool_label"], fields["pools"] = _node_pools(reader, value)
        elif name == "onPrem":
            fields["on_prem"] = _on_prem(reader, value)
        elif name == "energy":
            for key, _, item in reader.mapping(value, name, ("pricePerKWh",)):
                fields["energy_per_kwh"] = reader.price(item, f"energy.{key}")
        elif name == "cloudListPrices":
            fields["list_prices"] = _list_prices(reader, value)
    sheet = PriceSheet(source=path, **fields)
    if sheet.empty and sheet.energy_per_kwh is None:
        raise PricingFileError(f"{path}: no price in the file (give default, models, migProfiles, nodePools, "
                               "onPrem, cloudListPrices or energy)")
    return sheet


def _node_pools(reader: _Reader, node: yaml.Node) -> tuple[str | None, tuple[NodePool, ...]]:
    label: str | None = None
    pools: list[NodePool] = []
    for key, _, value in reader.mapping(node, "nodePools", ("label", "pools")):
        if key == "label":
            label = reader.text(value, "nodePools.label")
            continue
        for pool_name, _, pool_node in reader.mapping(value, "nodePools.pools"):
            where = f"nodePools.pools.{pool_name}"
            default: float | None = None
            per_model: dict[str, float] = {}
            nodes: tuple[str, ...] = ()
            for item, _, item_node in reader.mapping(pool_node, where, ("default", "models", "nodes")):
                if item == "default":
                    default = reader.price(item_node, f"{where}.default")
                elif item == "models":
                    per_model = reader.prices(item_node, f"{where}.models")
                else:
                    listed = reader.value(item_node, f"{where}.nodes")
                    if not isinstance(listed, list) or not all(isinstance(n, str) and n for n in listed):
                        raise reader.fail(item_node, f"{where}.nodes", "expected a list of node names")
                    nodes = tuple(listed)
            if default is None and not per_model:
                raise reader.fail(pool_node, where, "a pool needs a default price or models")
            pools.append(NodePool(pool_name, default, per_model, nodes))
    if pools and label is None and not any(pool.nodes for pool in pools):
        raise reader.fail(node, "nodePools.label", "give the node label that names the pool, or nodes: per pool")
    return label, tuple(pools)


def _on_prem(reader: _Reader, node: yaml.Node) -> dict[str, OnPrem]:
    result = {}
    for model, _, value in reader.mapping(node, "onPrem"):
        where = f"onPrem.{model}"
        entries = {key: item for key, _, item in reader.mapping(value, where, ("purchasePrice", "years"))}
        for needed in ("purchasePrice", "years"):
            if needed not in entries:
                raise reader.fail(value, f"{where}.{needed}", "missing (give purchasePrice and years)")
        result[model] = OnPrem(reader.price(entries["purchasePrice"], f"{where}.purchasePrice"),
                               reader.positive(entries["years"], f"{where}.years"))
    return result


def _list_prices(reader: _Reader, node: yaml.Node) -> dict[str, float]:
    """The user's list-price CSV (``model,price_per_gpu_hour``), relative to the pricing file."""
    name = reader.text(node, "cloudListPrices")
    path = Path(name) if Path(name).is_absolute() else Path(reader.path).parent / name
    try:
        text = read_text(path)
    except InputFileError as exc:
        raise reader.fail(node, "cloudListPrices", f"{path}: {exc}") from None
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
            value = float(row[1])
        except ValueError:
            value = -1.0
        if not math.isfinite(value) or value < 0:
            raise PricingFileError(f"{path}:{number}: price_per_gpu_hour: expected a non-negative number")
        if model in prices:
            raise PricingFileError(f"{path}:{number}: model: listed twice")
        prices[model] = value
    return prices
