"""``gpu-pod-exporter report``: a GPU cost and waste report per team and namespace, from Prometheus.

The exporter and its recording rules (``deploy/rules/gpu-pod-exporter-recording.yaml``) already
record, for every cluster, namespace, team and GPU model, how many whole-GPU equivalents are held,
how busy they are, how much memory and energy they use. This package turns those series into a
bill (GPU-hours, money, kWh) and a reclaim list (GPUs a namespace could give back, the most idle
pods), as text, CSV, JSON or HTML with plots.

Layout: ``timespec`` (points in time; durations: ``exporter.units``); the Prometheus HTTP API
(chunked range queries, retries, partial answers) is ``exporter.prometheus.client``, shared with
``doctor`` and ``top``; ``sources`` (which recorded series feed which column,
and what to say when a cluster lacks them), ``collect`` (the queries), ``compute`` (pure
arithmetic on the fetched series), ``model`` (the report's values), ``pricing``, ``text`` /
``tables`` / ``html`` / ``plots`` (the formats) and ``cli`` (the ``report`` subcommand).

Nothing here is imported by the exporter: ``exporter.cli`` imports ``exporter.report.cli`` only
when the first argument is ``report``. matplotlib (the ``report`` extra) is imported only for
``--format html``.
"""
