"""GPU error and health telemetry: Xid events, clock-event episodes and the "drain this GPU?" gauge.

Not to be confused with ``exporter.web.health`` (the exporter's own ``/health`` endpoint): this package
is about the GPUs. The NVML side lives in ``exporter.nvml.events`` (the event-set waiter thread); here
are the thread-safe ledgers those sources write into, the pure health evaluation, the metric builders
and the wiring into the app.
"""
