"""The pricing file: every key read as documented, every mistake one line naming the file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.report.cli import main
from exporter.report.pricing import HOURS_PER_YEAR
from exporter.report.pricingfile import PricingFileError, load_pricing

EXAMPLE = Path(__file__).resolve().parents[2] / "etc" / "chargeback" / "pricing.example.yaml"
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"


def test_the_example_file_loads_and_prices_in_the_documented_order() -> None:
    sheet = load_pricing(str(EXAMPLE))
    assert sheet.currency == "USD"
    assert sheet.gpu_hour_price(H100, "spot") == 1.40  # the pool's price for the model
    assert sheet.gpu_hour_price(A100, "spot") == 1.10  # the pool's default
    assert sheet.gpu_hour_price(H100, None) == 3.10  # models
    assert sheet.gpu_hour_price("NVIDIA L40S", None) == pytest.approx(28000 / (4 * HOURS_PER_YEAR))  # onPrem
    assert sheet.gpu_hour_price("NVIDIA L4", None) == 0.71  # the list-price file
    assert sheet.gpu_hour_price("Tesla V100", None) == 2.00  # default
    assert sheet.gpu_hour_price(H100, "a-pool-not-in-the-file") == 3.10
    assert sheet.instance_hour_price("1g.10gb") == 0.30
    assert sheet.instance_hour_price("2g.20gb") is None
    assert sheet.pool_of_node("gpu-node-02") == "on-prem-rack-1"
    assert sheet.pool_label == "cloud.google.com/gke-nodepool"
    assert sheet.energy_per_kwh == 0.21


@pytest.mark.parametrize(("text", "where"), [
    ("default: -1\n", ":1: default: expected a non-negative number"),
    ("models:\n  H100: cheap\n", ":2: models.H100: expected a non-negative number"),
    ("default: 1\nprices: {}\n", ":2: prices: unknown key (known keys: cloudListPrices, currency, default"),
    ("default: 1\ndefault: 2\n", ":2: default: duplicate key"),
    ("onPrem:\n  H100:\n    purchasePrice: 100\n", ":3: onPrem.H100.years: missing"),
    ("onPrem:\n  H100:\n    purchasePrice: 100\n    years: 0\n", ":4: onPrem.H100.years: expected a number above 0"),
    ("nodePools:\n  pools:\n    spot:\n      default: 1\n", ":2: nodePools.label: give the node label"),
    ("nodePools:\n  label: pool\n  pools:\n    spot: {}\n", ":4: nodePools.pools.spot: a pool needs a default"),
    ("energy:\n  perKWh: 0.2\n", ":2: energy.perKWh: unknown key (known keys: pricePerKWh)"),
    ("currency: [EUR]\n", ":1: currency: expected a non-empty string"),
    ("default: &a 1\nmodels: *a\n", ":2: yaml: YAML aliases"),
    ("currency: EUR\n", ": no price in the file"),
    ("", ": the file is empty"),
])
def test_mistakes_name_the_file_line_and_key(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "pricing.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PricingFileError) as error:
        load_pricing(str(path))
    assert str(error.value).startswith(str(path))
    assert where in str(error.value)


@pytest.mark.parametrize(("csv", "where"), [
    ("name,price\n", "list.csv:1: header: expected the columns model,price_per_gpu_hour"),
    ("model,price_per_gpu_hour\nL4,free\n", "list.csv:2: price_per_gpu_hour: expected a non-negative number"),
    ("model,price_per_gpu_hour\nL4,1\nL4,2\n", "list.csv:3: model: listed twice"),
])
def test_mistakes_in_the_list_price_file_name_it_and_the_line(tmp_path: Path, csv: str, where: str) -> None:
    (tmp_path / "list.csv").write_text(csv, encoding="utf-8")
    (tmp_path / "pricing.yaml").write_text("cloudListPrices: list.csv\n", encoding="utf-8")
    with pytest.raises(PricingFileError, match=where):
        load_pricing(str(tmp_path / "pricing.yaml"))


def test_the_report_exits_2_with_one_line_for_a_bad_pricing_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pricing.yaml"
    path.write_text("models:\n  H100: -3\n", encoding="utf-8")
    assert main(["--prometheus", "http://127.0.0.1:1", "--pricing", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpu-pod-exporter report: error: --pricing {path}:2: models.H100: expected a non-negative number"]


def test_pricing_and_price_flags_do_not_mix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--prometheus", "http://127.0.0.1:1", "--pricing", str(EXAMPLE), "--price-per-gpu-hour", "2"]) == 2
    assert "give either --pricing or --price-per-gpu-hour" in capsys.readouterr().err
