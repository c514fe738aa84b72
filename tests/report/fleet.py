"""A simulated two-cluster fleet over May and June 2025, for the sample monthly chargeback in docs/cost-report/.

Two months of a fleet are too many points for the 2-minute test data (tests/report/synthetic.py), so
the rules here are evaluated every hour and the raw gauges sampled as often (energy twice within
the 5 minutes before an evaluation, so that ``increase(...[5m])`` sees two samples). Every value is
constant over whole hours, so an hourly step is exact.

``eu-west``: node eu-gpu-1 with four H100s (node pool "on-demand"), node eu-gpu-2 with an A100 in
MIG mode (3g.40gb + 3g.40gb + 1g.10gb, node pool "spot"), both pools from kube-state-metrics'
kube_node_labels. ``us-east``: us-gpu-1 with two L40S bought outright, us-gpu-2 with two H100s in
a reserved pool named by node in the pricing file. Cost centres are a pod label (copied by the
exporter's allowlist) or the namespace's label. In June research adds a training pod and drops a
notebook, serving adds a second slice, recsys starts sharing an L40S, and vision gives back an H100.
"""

from __future__ import annotations

from tests.report.synthetic import A100, H100, Cluster, Device, Holding

ORIGIN = 1748736000  # 2025-06-01T00:00:00Z; May is hours -744 .. 0
FROM_H = -744.0
UNTIL_H = 720.0
INTERVAL_S = 3600
ENERGY_LEAD_S = 150.0
L40S = "NVIDIA L40S"
MAY = (FROM_H - 1.0, 0.0)
JUNE = (0.0, UNTIL_H + 1.0)
BOTH = (FROM_H - 1.0, UNTIL_H + 1.0)
AI, PROD = (("cost_center", "cc-ai"),), (("cost_center", "cc-prod"),)


def eu_west() -> Cluster:
    h = [Device("eu-west", "eu-gpu-1", i, f"GPU-eu1-{i}", H100) for i in range(4)]
    slice_a = Device("eu-west", "eu-gpu-2", 0, "GPU-eu2-0", A100, "3g.40gb", "1")
    slice_b = Device("eu-west", "eu-gpu-2", 0, "GPU-eu2-0", A100, "3g.40gb", "2")
    slice_c = Device("eu-west", "eu-gpu-2", 0, "GPU-eu2-0", A100, "1g.10gb", "9")
    holdings = [
        Holding(h[0], "llm-train", "train-0", "trainer", "research", *BOTH, pod_labels=AI),
        Holding(h[1], "llm-train", "train-0", "trainer", "research", *BOTH, pod_labels=AI),
        Holding(h[2], "llm-train", "train-1", "trainer", "research", *JUNE, pod_labels=AI),
        # a notebook all May and the first ten days of June, nearly idle; cost centre from its namespace
        Holding(h[3], "notebooks", "nb-0", "notebook", "research", BOTH[0], 240.0),
        Holding(slice_a, "inference", "chat-0", "server", "serving", *BOTH, pod_labels=PROD),
        Holding(slice_b, "inference", "chat-1", "server", "serving", *JUNE, pod_labels=PROD),
        # no team, no cost centre
        Holding(slice_c, "sandbox", "dev-0", "dev", None, *BOTH),
    ]
    return Cluster(
        name="eu-west", devices=[*h, slice_a, slice_b, slice_c], holdings=holdings,
        utilization={h[0]: ((*BOTH, 85.0),), h[1]: ((*BOTH, 85.0),), h[2]: ((*BOTH, 60.0),),
                     h[3]: ((*BOTH, 3.0),), slice_a: ((*BOTH, 0.4),), slice_b: ((*BOTH, 0.4),),
                     slice_c: ((*BOTH, 0.02),)},
        memory_mib={h[0]: ((*BOTH, 70000.0),), h[1]: ((*BOTH, 70000.0),), h[2]: ((*BOTH, 40000.0),),
                    h[3]: ((*BOTH, 2000.0),), slice_a: ((*BOTH, 20000.0),), slice_b: ((*BOTH, 20000.0),),
                    slice_c: ((*BOTH, 1000.0),)},
        power_w={"GPU-eu1-0": 600.0, "GPU-eu1-1": 600.0, "GPU-eu1-2": 450.0, "GPU-eu1-3": 90.0,
                 "GPU-eu2-0": 250.0},
        namespace_labels={"notebooks": {"label_cost_center": "cc-research"}},
        node_labels={"eu-gpu-1": {"label_cloud_google_com_gke_nodepool": "on-demand"},
                     "eu-gpu-2": {"label_cloud_google_com_gke_nodepool": "spot"}},
    )


def us_east() -> Cluster:
    l40s = [Device("us-east", "us-gpu-1", i, f"GPU-us1-{i}", L40S) for i in range(2)]
    h = [Device("us-east", "us-gpu-2", i, f"GPU-us2-{i}", H100) for i in range(2)]
    holdings = [
        Holding(l40s[0], "recsys", "rank-0", "ranker", "recsys", *BOTH, pod_labels=PROD),
        Holding(l40s[1], "recsys", "rank-1", "ranker", "recsys", *JUNE, replica="0", pod_labels=PROD),
        Holding(l40s[1], "recsys", "rank-2", "ranker", "recsys", *JUNE, replica="1", pod_labels=PROD),
        Holding(h[0], "vision", "train-v", "trainer", "vision", *BOTH, pod_labels=AI),
        Holding(h[1], "vision", "train-v2", "trainer", "vision", *MAY, pod_labels=AI),
    ]
    return Cluster(
        name="us-east", devices=[*l40s, *h], holdings=holdings,
        utilization={l40s[0]: ((*BOTH, 70.0),), l40s[1]: ((*BOTH, 50.0),), h[0]: ((*BOTH, 90.0),),
                     h[1]: ((*MAY, 80.0), (*JUNE, 0.0))},
        memory_mib={l40s[0]: ((*BOTH, 30000.0),), l40s[1]: ((*BOTH, 20000.0),), h[0]: ((*BOTH, 75000.0),),
                    h[1]: ((*BOTH, 0.0),)},
        power_w={"GPU-us1-0": 280.0, "GPU-us1-1": 200.0, "GPU-us2-0": 650.0, "GPU-us2-1": 120.0},
    )


def fleet() -> list[Cluster]:
    return [eu_west(), us_east()]
