"""The chain doctor: walk each GPU node bottom-up and name the first broken link.

from gpuchain.doctor import run_doctor
report = run_doctor(cluster)            # 7 list calls whatever the cluster size
report.root_causes, report.broken       # grouped findings; any error -> broken
"""

from __future__ import annotations

from gpuchain.doctor.diagnose import diagnose, run_doctor, walk
from gpuchain.doctor.model import LINKS, Finding, FindingGroup, Link, LinkState, NodeChain, Report, Severity
from gpuchain.doctor.snapshot import LogReader, gather
from gpuchain.doctor.structs import Snapshot

__all__ = [
    "LINKS",
    "Finding",
    "FindingGroup",
    "Link",
    "LinkState",
    "LogReader",
    "NodeChain",
    "Report",
    "Severity",
    "Snapshot",
    "diagnose",
    "gather",
    "run_doctor",
    "walk",
]
