"""``python -m exporter`` runs the same entry point as the ``gpu-pod-exporter`` script."""

from exporter.cli import main

raise SystemExit(main())
