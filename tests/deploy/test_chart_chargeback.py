"""The chart's chargeback CronJob: off by default; when on, a report command line the report accepts,
a pricing file the report loads, a PVC for the files, and an identity with no API access."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exporter.kube.labels import PodLabelPolicy
from exporter.report.chargeback import GroupBy
from exporter.report.cli import options
from exporter.report.pricingfile import load_pricing
from tests.deploy.chart_support import CHART_DIR, load_ci_values, render

VALUES = load_ci_values(CHART_DIR / "ci" / "chargeback-values.yaml")
NAME = "gpu-pod-exporter-chargeback"


def test_nothing_of_the_chargeback_is_rendered_by_default() -> None:
    rendered = render({})
    assert "CronJob" not in rendered.kinds()
    assert "PersistentVolumeClaim" not in rendered.kinds()
    assert not [obj for obj in rendered.objects if "chargeback" in obj["metadata"]["name"]]


def test_the_cronjob_runs_a_report_the_report_accepts_with_the_rendered_pricing_file(tmp_path: Path) -> None:
    rendered = render(VALUES)
    cronjob = rendered.one("CronJob", NAME)
    assert cronjob["spec"]["schedule"] == "0 3 1 * *"
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    args = container["args"]
    assert args[0] == "report"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == NAME
    assert args[args.index("--export-dir") + 1] == mounts["data"]
    assert args[args.index("--pricing") + 1] == mounts["pricing"] + "/pricing.yaml"
    # the ConfigMap's files are a pricing file (and its list-price file) the report loads
    configmap = rendered.one("ConfigMap", NAME)
    for key, text in configmap["data"].items():
        (tmp_path / key).write_text(text, encoding="utf-8")
    sheet = load_pricing(str(tmp_path / "pricing.yaml"))
    assert sheet.currency == "EUR"
    assert sheet.list_prices == {"NVIDIA L4": 0.71}
    assert sheet.mig_profiles == {"1g.10gb": 0.3}
    # the command line parses as the report's own (paths moved to this machine)
    local = [str(tmp_path / "pricing.yaml") if a.endswith("/pricing.yaml") else a for a in args[1:]]
    local[local.index("--export-dir") + 1] = str(tmp_path)
    opts = options(local, 1_751_328_000.0)  # 2025-07-01T00:00:00Z: bills June 2025, compares with May
    assert (opts.window.start, opts.window.end) == (1_748_736_000.0, 1_751_328_000.0)
    assert opts.previous is not None and opts.previous.start == 1_746_057_600.0
    assert opts.share_idle == "proportional"
    assert opts.group_by == GroupBy("label", "cost-center", fallback_namespace=True)
    assert opts.connection.tenant == "gpu-fleet"


def test_the_job_has_no_kubernetes_api_access() -> None:
    rendered = render(VALUES)
    pod = rendered.one("CronJob", NAME)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert rendered.one("ServiceAccount", NAME)["automountServiceAccountToken"] is False
    for binding in rendered.all("RoleBinding") + rendered.all("ClusterRoleBinding"):
        assert all(subject["name"] != NAME for subject in binding["subjects"])


def test_an_existing_claim_is_used_and_no_pvc_is_created() -> None:
    values = yaml.safe_load(yaml.safe_dump(VALUES))
    values["chargeback"]["storage"] = {"existingClaim": "billing"}
    rendered = render(values)
    assert "PersistentVolumeClaim" not in rendered.kinds()
    pod = rendered.one("CronJob", NAME)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert {v["name"]: v for v in pod["volumes"]}["data"]["persistentVolumeClaim"]["claimName"] == "billing"
    pvc = render(VALUES).one("PersistentVolumeClaim", NAME)
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_enabled_without_a_prometheus_url_fails_with_the_value_named() -> None:
    with pytest.raises(Exception, match=r"chargeback\.prometheusUrl"):
        render({"chargeback": {"enabled": True}})


def test_the_cost_center_pod_label_reaches_the_series_the_chargeback_groups_by() -> None:
    """label:cost-center needs the exporter to copy the pod label: the chart's allowlist does."""
    env = render(VALUES).env
    assert env["DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"] == "true"
    policy = PodLabelPolicy(True, env["DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"].split(","))
    copied = dict(policy.select({"cost-center": "cc-100", "app": "trainer"}))
    assert copied == {GroupBy.parse("label:cost-center").series_label: "cc-100"}
