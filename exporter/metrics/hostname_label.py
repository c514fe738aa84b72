"""The node label's two spellings: ``Hostname`` (dcgm-exporter up to 4.8.2) and ``hostname`` (4.8.3+).

dcgm-exporter 4.8.3 renamed the label (its pull request 655) so that it joins Slurm's ``hostname``.
The exporter writes one spelling (``--dcgm-exporter-compat``); everything that reads series or
alerts written by either generation (the remediator, doctor) looks the node up here, so that one
rule holds everywhere: the configured name first, then its other spelling.
"""

from __future__ import annotations

from collections.abc import Mapping

SPELLINGS = ("Hostname", "hostname")


def node_name(labels: Mapping[str, str], preferred: str = "Hostname") -> str:
    """The node named by ``labels``: ``preferred``'s value, else (for either spelling) the other one's."""
    value = labels.get(preferred, "")
    if value or preferred not in SPELLINGS:
        return value
    return next((labels[other] for other in SPELLINGS if other != preferred and labels.get(other)), "")
