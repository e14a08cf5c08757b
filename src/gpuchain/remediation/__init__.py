"""Remediation: from a GPU health event to workloads moved off the failed GPU, within limits.

- ``publisher``: node side; GPUHealthy condition, Events, and the GPU fault/pod annotations.
- ``decide``: the pure decision (evict, taint/cordon, breaker) over plain Kubernetes objects.
- ``controller``: the shell that reads the cluster, decides and applies through the kube port.

Its simulated clusters and repair scenarios are the simulator's (``gpuchain.sim.remediation``,
``gpuchain.sim.repair``).
"""

from gpuchain.remediation.controller import Outcome, Remediator, Report
from gpuchain.remediation.decide import (
    Action,
    ActionKind,
    Breaker,
    Decision,
    Held,
    HoldReason,
    NodeAction,
    Policy,
    decide,
)
from gpuchain.remediation.model import CONDITION_TYPE, FAULTS_ANNOTATION, PODS_ANNOTATION, TAINT_KEY, Fault
from gpuchain.remediation.publisher import FaultTracker, GpuHealthPublisher, PublishResult

__all__ = [
    "CONDITION_TYPE",
    "FAULTS_ANNOTATION",
    "PODS_ANNOTATION",
    "TAINT_KEY",
    "Action",
    "ActionKind",
    "Breaker",
    "Decision",
    "Fault",
    "FaultTracker",
    "GpuHealthPublisher",
    "Held",
    "HoldReason",
    "NodeAction",
    "Outcome",
    "Policy",
    "PublishResult",
    "Remediator",
    "Report",
    "decide",
]
