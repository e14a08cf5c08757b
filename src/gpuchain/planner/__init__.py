"""Capacity planner: whole GPU, MIG or time-slicing for one model, and how often a fleet loses a GPU.

Pure functions over frozen dataclasses (`plan`, `fleet_risk`); the CLI in
`gpuchain.commands.plan` only parses flags and renders, and `plot.write_png` is the one writer.
"""

from gpuchain.planner.capacity import (
    Isolation,
    IsolationNeed,
    Option,
    Plan,
    PlanRequest,
    Recommendation,
    Sharing,
    Workload,
    max_instances,
    plan,
    resolve_gpu,
)
from gpuchain.planner.errors import PlanInputError
from gpuchain.planner.fleet import FleetRisk, fleet_risk
from gpuchain.planner.units import MIB, format_mib, parse_memory, parse_rate

__all__ = [
    "MIB",
    "FleetRisk",
    "Isolation",
    "IsolationNeed",
    "Option",
    "Plan",
    "PlanInputError",
    "PlanRequest",
    "Recommendation",
    "Sharing",
    "Workload",
    "fleet_risk",
    "format_mib",
    "max_instances",
    "parse_memory",
    "parse_rate",
    "plan",
    "resolve_gpu",
]
