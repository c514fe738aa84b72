"""The simulator: fake NVML library, simulated kubelet and API server, scenarios (``--simulate``).

Shipped in the same wheel as the product (``exporter``), which reaches it only through
``simulator.entry`` (see that module and ``exporter.simulation``).
"""
