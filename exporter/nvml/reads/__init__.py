"""The kinds of NVML read the sampler runs on each GPU, one module each, in the order they run.

Each read is an object with one interface (``base.DeviceRead``): the parts of the cycle it
``produces`` (and ``needs`` from reads before it), whether the sampling plan has it run at all
(``chosen``), whether this GPU can answer it (``supported``), and ``read``. The sampler
(``exporter.nvml.sampler``) only runs the chosen, supported reads of ``READS`` in order and assembles
the snapshot from the ``DeviceCycle`` they filled.

How to add a kind of NVML read: write ``exporter/nvml/reads/<kind>.py`` with a class giving
``name``, ``needs``, ``produces``, ``chosen``, ``supported`` and ``read`` (sort failures with
``ReadContext.handle_error``; keep per-GPU memory in ``base.DeviceState``); put one instance in
``READS`` below after the reads it needs; if it fills a new part of the cycle, add that field to
``base.DeviceCycle`` (and, if the snapshot carries it, to ``exporter.snapshot.DeviceReading`` and
``Sampler._sample_device``); if the counters decide whether it runs, give ``exporter/nvml/plan.py``
(``SamplingPlan.for_specs``) what ``chosen`` asks. Tests go in ``tests/nvml/`` against the fake NVML
(``tests/nvml/test_reads.py`` checks the order of ``READS`` against ``needs``/``produces``).
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.nvml.reads.base import DeviceRead, ReadContext
from exporter.nvml.reads.catalog_values import CatalogValuesRead
from exporter.nvml.reads.field_values import FieldValuesRead
from exporter.nvml.reads.gpm_metrics import GpmRead
from exporter.nvml.reads.mig_instances import MigInstancesRead
from exporter.nvml.reads.mig_layout import MigLayoutRead
from exporter.nvml.reads.named_queries import NamedQueriesRead
from exporter.nvml.reads.processes import ProcessesRead

# The order is the NVML call order of a cycle (and each read comes after what it needs).
READS: tuple[DeviceRead, ...] = (MigLayoutRead(), NamedQueriesRead(), GpmRead(), FieldValuesRead(),
                                 CatalogValuesRead(), ProcessesRead(), MigInstancesRead())


def chosen_reads(context: ReadContext, reads: Sequence[DeviceRead] = READS) -> tuple[DeviceRead, ...]:
    """The reads this cycle's plan and settings need, in order."""
    return tuple(read for read in reads if read.chosen(context))
