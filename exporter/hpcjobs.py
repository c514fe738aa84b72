"""``--hpc-job-mapping-dir``: label GPU series with the batch jobs using them (bare-metal clusters).

dcgm-exporter's convention (its ``internal/pkg/transformation/hpc.go``): a
scheduler's prolog/epilog (Slurm, PBS, ...) keeps one file per GPU in a directory, named ``<gpu>``
(the ``gpu`` label, NVML's index) or ``<gpu>.<gi>`` (a MIG GPU instance, the ``GPU_I_ID`` label),
holding the ids of the jobs on it, one per line. Every series of that GPU or instance is then
repeated once per job with an ``hpc_job`` label; a GPU without a file (or with an empty one) keeps
its series unchanged.

dcgm-exporter lists and reads the directory on every scrape. Here a thread re-reads it every
``--hpc-job-mapping-interval`` (5 s) and publishes an immutable mapping; a render only looks it up
(``labeler``, its label source: ``install(hub)``), and the exposition is re-rendered only when the
mapping changed. Defensive
reading, since the directory is written by other programs: names that are not ``<n>`` or
``<n>.<n>`` and anything but regular files are ignored, blank lines are skipped, at most
``MAX_JOBS_PER_FILE`` ids are taken from a file and at most ``MAX_FILE_BYTES`` are read. A missing
directory or an unreadable file is logged once per state change, not once per read.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

from exporter.hub import Hub, LabelSets, LabelTransform
from exporter.logs import get_logger
from exporter.periodic import Periodic
from exporter.snapshot import DeviceIdentity

LOG = get_logger("hpcjobs")

LABEL = "hpc_job"
MAX_JOBS_PER_FILE = 256
MAX_FILE_BYTES = 64 * 1024
_FILE_NAME = re.compile(r"^(\d+)(?:\.(\d+))?$")

JobKey = tuple[int, int | None]  # (gpu index, GPU-instance id or None)
JobMapping = Mapping[JobKey, tuple[str, ...]]
EMPTY: JobMapping = MappingProxyType({})


def _read_jobs(path: Path) -> tuple[tuple[str, ...], bool]:
    """The job ids in one file and whether the file was cut short (too large or too many ids)."""
    with path.open("rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    truncated = len(data) > MAX_FILE_BYTES
    lines = data[:MAX_FILE_BYTES].decode("utf-8", "replace").splitlines()
    if truncated and lines:
        lines = lines[:-1]  # the last line may be cut in the middle
    jobs = tuple(dict.fromkeys(line.strip() for line in lines if line.strip()))
    if len(jobs) > MAX_JOBS_PER_FILE:
        return jobs[:MAX_JOBS_PER_FILE], True
    return jobs, truncated


def read_job_mapping(directory: Path) -> tuple[JobMapping, list[str]]:
    """(the mapping, problems to report). Raises OSError when the directory itself cannot be listed."""
    mapping: dict[JobKey, tuple[str, ...]] = {}
    problems: list[str] = []
    with os.scandir(directory) as entries:
        names = sorted(entry.name for entry in entries)
    for name in names:
        match = _FILE_NAME.match(name)
        if match is None:
            continue
        path = directory / name
        try:
            if not stat.S_ISREG(path.stat().st_mode):
                continue
            jobs, truncated = _read_jobs(path)
        except OSError as exc:
            problems.append(f"{path}: cannot read: {exc.strerror or exc}")
            continue
        if truncated:
            problems.append(f"{path}: more than {MAX_JOBS_PER_FILE} job ids or {MAX_FILE_BYTES} bytes; "
                            "the rest is ignored")
        if jobs:
            key = (int(match.group(1)), int(match.group(2)) if match.group(2) is not None else None)
            mapping[key] = jobs
    return MappingProxyType(mapping), problems


class HpcJobMapping:
    """The directory, re-read in the background; its label source adds ``hpc_job`` at render time."""

    def __init__(self, directory: str, interval_s: float, on_change: Callable[[], None] = lambda: None) -> None:
        self.directory = Path(directory)
        self.interval_s = interval_s
        self.on_change = on_change
        self._mapping: JobMapping = EMPTY
        self._state: tuple[str, ...] | None = None  # the problems last logged
        self._thread = Periodic("hpc-job-mapping", self._step, interval_s)

    @property
    def mapping(self) -> JobMapping:
        return self._mapping

    def refresh(self) -> bool:
        """Read the directory once; True when the mapping changed (the exposition must be re-rendered)."""
        try:
            mapping, problems = read_job_mapping(self.directory)
        except OSError as exc:
            mapping, problems = EMPTY, [f"{self.directory}: cannot list the HPC job mapping directory: "
                                        f"{exc.strerror or exc}; series carry no hpc_job label until it exists"]
        state = tuple(problems)
        if state != self._state:
            for problem in problems:
                LOG.warning(problem)
            if self._state and not problems:
                LOG.info("HPC job mapping directory %s is readable again", self.directory)
            self._state = state
        changed = mapping != self._mapping
        self._mapping = mapping
        return changed

    def start(self) -> None:
        LOG.info("HPC job mapping on", extra={"fields": {"directory": str(self.directory),
                                                         "interval_s": self.interval_s}})
        if self.refresh():
            self.on_change()
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def _step(self) -> float:
        if self.refresh():
            self.on_change()
        return self.interval_s

    def install(self, hub: Hub) -> None:
        """Plug into the hub: a label source, a service, and a re-render whenever the mapping changes."""
        self.on_change = hub.invalidate
        hub.add_service(self.start, self.stop)
        hub.add_label_source(self.labeler)

    def labeler(self) -> LabelTransform | None:
        """This render's transform: each series of a GPU (instance) with jobs, once per job with ``hpc_job``."""
        mapping = self._mapping
        if not mapping:
            return None

        def add_jobs(identity: DeviceIdentity, gpu_instance_id: int | None, label_sets: LabelSets) -> LabelSets:
            jobs = mapping.get((identity.index, gpu_instance_id))
            if not jobs:
                return label_sets
            return [{**labels, LABEL: job} for labels in label_sets for job in jobs]

        return add_jobs
