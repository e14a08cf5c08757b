"""Capacity planner: whole GPU, MIG or time-slicing for one model, how often a fleet loses a GPU, and
the device plugin alone or an operator.

Pure functions over frozen dataclasses (`plan`, `fleet_risk`, `plan_stack`); `observed.read_snapshot`
reads `plan_stack`'s inputs from the doctor's snapshot of a cluster; the CLI in
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
from gpuchain.planner.stack import (
    Crossover,
    DriverOwner,
    InputSource,
    Need,
    Reading,
    Route,
    RouteCost,
    StackPlan,
    StackRequest,
    plan_stack,
    resolve,
)
from gpuchain.planner.units import MIB, format_mib, parse_memory, parse_rate

__all__ = [
    "MIB",
    "Crossover",
    "DriverOwner",
    "FleetRisk",
    "InputSource",
    "Isolation",
    "IsolationNeed",
    "Need",
    "Option",
    "Plan",
    "PlanInputError",
    "PlanRequest",
    "Reading",
    "Recommendation",
    "Route",
    "RouteCost",
    "Sharing",
    "StackPlan",
    "StackRequest",
    "Workload",
    "fleet_risk",
    "format_mib",
    "max_instances",
    "parse_memory",
    "parse_rate",
    "plan",
    "plan_stack",
    "resolve",
    "resolve_gpu",
]
