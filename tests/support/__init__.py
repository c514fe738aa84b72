"""What every tier of the suite needs to drive real programs: polling with a deadline, free ports,
required programs, started processes, and the harnesses built on them (the exporter, Prometheus,
Alertmanager, Thanos, a simulated node's Kubernetes API).

One set of primitives (``polling``, ``ports``, ``programs``, ``processes``) so that a harness never
writes its own deadline loop, port picker or stop sequence again.
"""
