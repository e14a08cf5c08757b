"""Device plugin alone or an operator: who owns the driver's life cycle, and what each route costs.

The deciding variable is not the node count but who installs and upgrades the driver. When it
ships in the cloud provider's node image (EKS accelerated AMIs, AKS GPU pools, GKE), a node costs
nothing by hand: the DaemonSets cover every node at once and the driver rolls with the image, so an
operator is one more control plane to understand and upgrade. When the team owns the driver
(bare metal, self-built images), each node costs hours by hand at install and again at every
driver upgrade, while an operator costs a Helm install and then a version bump and a watched
roll-out per upgrade, whatever the node count:

    by hand:       nodes x hours per node x (1 + upgrades a year)
    with operator: install hours + upgrades a year x hours per change

(the first year, install included; rework after manual mistakes is not counted). MIG layouts,
rolling driver upgrades, declarative GitOps and DRA are votes for the operator whatever the hours:
its MIG manager, upgrade controller, ClusterPolicy and DRA driver are what provide them.
``plan_stack`` is a pure function over a frozen request; the CLI only parses flags and renders.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gpuchain.planner.errors import PlanInputError


class DriverOwner(enum.StrEnum):
    """Who installs and upgrades the GPU driver on the nodes."""

    CLOUD_IMAGE = "cloud-image"  #: the cloud provider's node image carries it and rolls it
    SELF_MANAGED = "self-managed"  #: the team installs and upgrades it (bare metal, own images)


class Need(enum.StrEnum):
    """What only an operator brings out of the box, each a vote for it whatever the hours."""

    MIG = "mig"
    ROLLING_DRIVER_UPGRADES = "rolling-driver-upgrades"
    GITOPS = "gitops"
    DRA = "dra"


#: What each need asks of the operator, for the reason sentence.
NEED_BY = {
    Need.MIG: "MIG layouts need the MIG manager",
    Need.ROLLING_DRIVER_UPGRADES: "rolling driver upgrades need its upgrade controller (node by node, drained)",
    Need.GITOPS: "GitOps needs the chain as declarative state (a ClusterPolicy) that a controller converges",
    Need.DRA: "DRA needs its DRA driver, deployed and kept beside the driver",
}


class Route(enum.StrEnum):
    """The three answers, from the least to the most machinery."""

    DEVICE_PLUGIN = "device-plugin"
    PLUGIN_GFD_EXPORTER = "device-plugin+gfd+exporter"
    OPERATOR = "operator"

    @property
    def label(self) -> str:
        """The route in words."""
        return _LABELS[self]


_LABELS = {
    Route.DEVICE_PLUGIN: "the device plugin alone",
    Route.PLUGIN_GFD_EXPORTER: "the device plugin + GPU feature discovery + DCGM exporter",
    Route.OPERATOR: "an operator (gpuchain's chart or NVIDIA's GPU Operator)",
}

MAX_NODES = 1_000_000
"""The most nodes (and GPU models, driver versions) the planner takes: above the largest clusters."""
MAX_UPGRADES_PER_YEAR = 365.0
MAX_HOURS = 10_000.0
"""The most hours any one step may cost: more than a year of one person's work."""
DEFAULT_UPGRADES_PER_YEAR = 3.0
"""Driver upgrades a year: a quarterly cadence, the first of the four quarters being the install."""

DEFAULT_HOURS_PER_NODE = {DriverOwner.SELF_MANAGED: 1.0, DriverOwner.CLOUD_IMAGE: 0.0}
"""Hours one node costs by hand per install or upgrade. Self-managed: driver, toolkit and a check
on each node, about an hour. Cloud image: zero, because the driver and toolkit come with the node
image and the cloud rolls them; the device plugin DaemonSet is one ``kubectl apply`` for all nodes."""

DEFAULT_OPERATOR_INSTALL_HOURS = 2.0
"""A Helm install of the operator and tuning its values."""

DEFAULT_OPERATOR_HOURS_PER_CHANGE = 2.0
"""One driver upgrade with an operator: bump the version in the ClusterPolicy, watch the roll-out."""


@dataclass(frozen=True, kw_only=True)
class StackRequest:
    """The inputs of the plugin-or-operator question.

    ``hours_per_node`` is None to take the driver owner's default (`DEFAULT_HOURS_PER_NODE`).
    ``gpu_models`` and ``driver_versions`` measure heterogeneity: with more than one of either,
    workloads must pick nodes by label and someone must watch each pool, which the plugin alone
    does not give.
    """

    nodes: int
    driver: DriverOwner
    driver_upgrades_per_year: float = DEFAULT_UPGRADES_PER_YEAR
    hours_per_node: float | None = None
    operator_install_hours: float = DEFAULT_OPERATOR_INSTALL_HOURS
    operator_hours_per_change: float = DEFAULT_OPERATOR_HOURS_PER_CHANGE
    needs: tuple[Need, ...] = ()  #: in `Need` order, so JSON and tables list them the same way every run
    gpu_models: int = 1
    driver_versions: int = 1

    @property
    def node_hours(self) -> float:
        """Hours per node by hand, the default of the driver owner unless given."""
        return DEFAULT_HOURS_PER_NODE[self.driver] if self.hours_per_node is None else self.hours_per_node


@dataclass(frozen=True)
class RouteCost:
    """A route's hours: the install, each driver upgrade, and the first year (install included)."""

    install_hours: float
    hours_per_upgrade: float
    yearly_hours: float


@dataclass(frozen=True)
class Crossover:
    """Where the operator starts to cost fewer hours than the work by hand.

    ``nodes``: the fewest nodes, at the request's upgrades a year, at which the operator is cheaper;
    ``upgrades_per_year``: the fewest whole upgrades a year, at the request's node count. None: never
    (a node costs nothing by hand, or the operator's changes cost more than a node's).
    """

    nodes: int | None
    upgrades_per_year: int | None


@dataclass(frozen=True, kw_only=True)
class InputSource:
    """Where one input came from: ``given`` (a flag), ``read`` (the cluster, with its evidence) or
    ``assumed`` (a default, with what it stands for)."""

    flag: str
    value: str
    source: str
    evidence: str = ""


@dataclass(frozen=True, kw_only=True)
class StackPlan:
    """The answer: the route, why in one sentence, both routes' hours, their ratio and the crossover.

    ``ratio`` is hours by hand over hours with the operator (None when the operator costs nothing).
    ``inputs`` says where each input came from (given, read or assumed); ``read_from`` names the
    cluster or dump and its GPU stack when inputs were read from one ("" otherwise).
    """

    request: StackRequest
    recommendation: Route
    label: str
    reason: str
    setup: str
    by_hand: RouteCost
    operator: RouteCost
    ratio: float | None
    crossover: Crossover
    inputs: tuple[InputSource, ...] = field(default=())
    read_from: str = ""


def validate(req: StackRequest) -> None:
    """Raise PlanInputError naming the flag of the first input out of range.

    The upper bounds keep the arithmetic meaningful: 1e308 upgrades a year overflowed the
    crossover into a traceback, and 1e308 install hours made its search walk for ever."""
    if not 1 <= req.nodes <= MAX_NODES:
        raise PlanInputError(f"--nodes: must be from 1 to {MAX_NODES:,} GPU nodes, got {req.nodes}")
    for flag, value, most in (
        ("--driver-upgrades-per-year", req.driver_upgrades_per_year, MAX_UPGRADES_PER_YEAR),
        ("--hours-per-node", req.node_hours, MAX_HOURS),
        ("--operator-install-hours", req.operator_install_hours, MAX_HOURS),
        ("--operator-hours-per-change", req.operator_hours_per_change, MAX_HOURS),
    ):
        if not math.isfinite(value) or value < 0:
            raise PlanInputError(f"{flag}: must be zero or more, got {value:g}")
        if value > most:
            raise PlanInputError(f"{flag}: must be at most {most:,g}, got {value:g}")
    for flag, count in (("--gpu-models", req.gpu_models), ("--driver-versions", req.driver_versions)):
        if not 1 <= count <= MAX_NODES:
            raise PlanInputError(f"{flag}: must be from 1 to {MAX_NODES:,}, got {count}")


def costs(req: StackRequest, nodes: int | None = None) -> tuple[RouteCost, RouteCost]:
    """Hours by hand and with the operator, at ``nodes`` (default: the request's)."""
    n = req.nodes if nodes is None else nodes
    per_round = n * req.node_hours
    upgrades = req.driver_upgrades_per_year
    hand = RouteCost(per_round, per_round, per_round + upgrades * per_round)
    op = RouteCost(
        req.operator_install_hours,
        req.operator_hours_per_change,
        req.operator_install_hours + upgrades * req.operator_hours_per_change,
    )
    return hand, op


def crossover(req: StackRequest) -> Crossover:
    """The fewest nodes, and the fewest upgrades a year, at which the operator costs fewer hours.

    Solved from the two lines, then settled on the comparison `plan_stack` makes, so a rounding
    error in the division never moves the answer by one.
    """
    h, u = req.node_hours, req.driver_upgrades_per_year
    install, change = req.operator_install_hours, req.operator_hours_per_change
    nodes = None
    if h > 0:
        guess = (install + u * change) / (h * (1 + u))
        if guess < MAX_NODES:  # beyond, "never" for any cluster there is (and no float walk to get there)
            nodes = _first(lambda n: _operator_cheaper(req, n, u), math.floor(guess) + 1, 1)
    # by hand - operator = (nodes x h - install) + upgrades x (nodes x h - change): a line in upgrades
    start, slope = req.nodes * h - install, req.nodes * h - change
    upgrades = None
    if start > 0 or slope > 0:
        guess = 0.0 if start > 0 else math.floor(-start / slope) + 1
        if guess <= MAX_UPGRADES_PER_YEAR:
            upgrades = _first(lambda k: _operator_cheaper(req, req.nodes, k), int(guess), 0)
    return Crossover(nodes, upgrades)


def _operator_cheaper(req: StackRequest, nodes: int, upgrades: float) -> bool:
    hand, op = costs(replace(req, driver_upgrades_per_year=upgrades), nodes)
    return op.yearly_hours < hand.yearly_hours


def _first(cheaper: Callable[[int], bool], guess: int, least: int) -> int:
    """The least whole value from ``least`` on where ``cheaper`` holds, from a guess one off at most
    (it holds from some value on: the hours by hand grow faster than the operator's)."""
    at = max(guess, least)
    while not cheaper(at):
        at += 1
    while at > least and cheaper(at - 1):
        at -= 1
    return at


def plan_stack(req: StackRequest, *, inputs: tuple[InputSource, ...] = (), read_from: str = "") -> StackPlan:
    """Recommend a route: needs first, then hours (self-managed driver), then heterogeneity.

    Raises PlanInputError naming the flag when an input is out of range.
    """
    validate(req)
    hand, op = costs(req)
    cross = crossover(req)
    ratio = hand.yearly_hours / op.yearly_hours if op.yearly_hours else None
    hours = f"{_h(hand.yearly_hours)} hours a year by hand against {_h(op.yearly_hours)} with an operator"
    if ratio is not None and ratio > 1:
        hours += f" ({ratio:.3g}x)"
    heterogeneous = req.gpu_models > 1 or req.driver_versions > 1
    if req.needs:
        route = Route.OPERATOR
        wants = "; ".join(NEED_BY[n] for n in Need if n in req.needs)
        reason = f"{wants[:1].upper()}{wants[1:]}: only an operator brings that, whatever the hours ({hours})."
    elif req.driver is DriverOwner.SELF_MANAGED and hand.yearly_hours > op.yearly_hours:
        route = Route.OPERATOR
        reason = (
            f"Your team owns the driver on {req.nodes} nodes: {hours}, and the operator rolls each upgrade "
            "declaratively, node by node, where by hand every node is redone."
        )
    else:
        route = Route.PLUGIN_GFD_EXPORTER if heterogeneous else Route.DEVICE_PLUGIN
        reason = _by_hand_reason(req, hours, cross, heterogeneous)
    return StackPlan(
        request=req,
        recommendation=route,
        label=route.label,
        reason=reason,
        setup=_setup(route, req.driver),
        by_hand=hand,
        operator=op,
        ratio=ratio,
        crossover=cross,
        inputs=inputs,
        read_from=read_from,
    )


def _by_hand_reason(req: StackRequest, hours: str, cross: Crossover, heterogeneous: bool) -> str:
    if req.driver is DriverOwner.CLOUD_IMAGE:
        why = f"The driver comes with the cloud's node image, so {req.nodes} nodes cost {hours}"
        if req.node_hours == 0:
            why += ", and an operator would only be one more control plane to understand and upgrade"
    else:
        where = f"; the operator pays from {cross.nodes} nodes" if cross.nodes is not None else ""
        why = f"Your team owns the driver, but on {req.nodes} nodes that is {hours}{where}"
    if heterogeneous:
        mixed = [
            what
            for what, count in (("GPU models", req.gpu_models), ("driver versions", req.driver_versions))
            if count > 1
        ]
        why += (
            f"; with {' and '.join(mixed)} mixed, feature discovery labels let pods pick their pool and the "
            "exporter shows each pool's load"
        )
    return why + "."


def _setup(route: Route, driver: DriverOwner) -> str:
    host = (
        "the node image already has the driver and toolkit"
        if driver is DriverOwner.CLOUD_IMAGE
        else "install the driver and container toolkit on each node first"
    )
    if route is Route.DEVICE_PLUGIN:
        return f"NVIDIA's device plugin DaemonSet (its Helm chart or static manifest); {host}"
    if route is Route.PLUGIN_GFD_EXPORTER:
        return (
            f"NVIDIA's device plugin chart with gfd.enabled=true, plus dcgm-exporter; {host}; pods select a model "
            "with nodeSelector nvidia.com/gpu.product"
        )
    install = "helm install gpuchain charts/gpuchain -n gpu-operator --create-namespace"
    if driver is DriverOwner.CLOUD_IMAGE:
        return (
            f"{install} --set driver.enabled=false (the node image's driver stays; a driver container would fight it)"
        )
    return f"{install} (a driver container per kernel); each upgrade: --set driver.version=NEW, watch the roll-out"


@dataclass(frozen=True, kw_only=True)
class Reading:
    """What a cluster (or a dump of one) says about the inputs, each with its evidence.

    ``gpu_models`` and ``driver_versions`` are empty when no node carries a label that names them
    (no feature discovery running); ``mig_nodes`` are the nodes whose GPUs are split into MIG devices.
    """

    where: str  #: "live cluster", "dump DIR", "scenario NAME (simulated)"
    stack: str  #: the GPU stack the doctor recognised, in words
    nodes: int
    nodes_evidence: str
    driver: DriverOwner
    driver_evidence: str
    gpu_models: tuple[str, ...] = ()
    gpu_models_evidence: str = ""
    driver_versions: tuple[str, ...] = ()
    driver_versions_evidence: str = ""
    mig_nodes: tuple[str, ...] = ()
    mig_evidence: str = ""


#: Why each default is what it is, for inputs nobody gave and no cluster answered.
_ASSUMED = {
    "driver_upgrades_per_year": "a quarterly driver cadence, the first quarter being the install",
    "operator_install_hours": "a Helm install and tuning its values",
    "operator_hours_per_change": "bump the driver version in the ClusterPolicy and watch the roll-out",
    "gpu_models": "one GPU model",
    "driver_versions": "one driver version",
}
_HOURS_ASSUMED = {
    DriverOwner.SELF_MANAGED: "driver, toolkit and a check on each node by hand",
    DriverOwner.CLOUD_IMAGE: "the node image carries driver and toolkit and the cloud rolls them; "
    "the device plugin DaemonSet is one apply for every node",
}


def flag_of(name: str) -> str:
    """The command-line flag of a `StackRequest` field."""
    return "--need" if name == "needs" else "--" + name.replace("_", "-")


def resolve(given: Mapping[str, Any], reading: Reading | None = None) -> tuple[StackRequest, tuple[InputSource, ...]]:
    """The request from the flags the user gave (`StackRequest` field names; None or empty: not given),
    then what ``reading`` read, then the defaults; and where each input came from.

    Raises PlanInputError when nodes or the driver owner are neither given nor read.
    """
    values: dict[str, Any] = {k: v for k, v in given.items() if v is not None and v != () and v != []}
    sources: dict[str, InputSource] = {}
    if reading is not None:
        read: dict[str, tuple[Any, str]] = {
            "nodes": (reading.nodes, reading.nodes_evidence),
            "driver": (reading.driver, reading.driver_evidence),
        }
        if reading.gpu_models:
            read["gpu_models"] = (len(reading.gpu_models), reading.gpu_models_evidence)
        if reading.driver_versions:
            read["driver_versions"] = (len(reading.driver_versions), reading.driver_versions_evidence)
        if reading.nodes == 0 and "nodes" not in values:
            raise PlanInputError(
                f"--nodes: {reading.where} has no GPU nodes ({reading.nodes_evidence}); pass --nodes N"
            )
        for name, (value, evidence) in read.items():
            if name not in values:
                values[name] = value
                sources[name] = InputSource(flag=flag_of(name), value=_show(value), source="read", evidence=evidence)
    missing = [flag_of(k) for k in ("nodes", "driver") if k not in values]
    if missing:
        raise PlanInputError(
            f"{', '.join(missing)} required (or read them with --from-cluster, --scenario NAME or --from-dump DIR), "
            "e.g. --nodes 100 --driver self-managed"
        )
    given_needs = frozenset(values.get("needs", ()))
    mig_read = reading is not None and bool(reading.mig_nodes) and Need.MIG not in given_needs
    values["needs"] = tuple(n for n in Need if n in given_needs or (mig_read and n is Need.MIG))
    values.setdefault("hours_per_node", DEFAULT_HOURS_PER_NODE[DriverOwner(values["driver"])])
    req = StackRequest(**values)
    out = []
    for f in fields(StackRequest):
        value = getattr(req, f.name)
        if f.name in sources:
            out.append(sources[f.name])
        elif f.name == "needs":
            out.append(_needs_source(req.needs, given_needs, reading if mig_read else None))
        elif f.name in given and given[f.name] is not None:
            out.append(InputSource(flag=flag_of(f.name), value=_show(value), source="given"))
        elif f.name == "hours_per_node":
            out.append(
                InputSource(
                    flag=flag_of(f.name), value=_show(value), source="assumed", evidence=_HOURS_ASSUMED[req.driver]
                )
            )
        else:
            out.append(
                InputSource(flag=flag_of(f.name), value=_show(value), source="assumed", evidence=_ASSUMED[f.name])
            )
    return req, tuple(out)


def _needs_source(needs: tuple[Need, ...], given: frozenset[Need], reading: Reading | None) -> InputSource:
    value = ", ".join(n.value for n in needs) or "none"
    if reading is not None:
        return InputSource(
            flag="--need",
            value=value,
            source="read",
            evidence=reading.mig_evidence + (" (the rest given)" if given else ""),
        )
    if given:
        return InputSource(flag="--need", value=value, source="given")
    return InputSource(
        flag="--need", value=value, source="assumed", evidence="no MIG, rolling driver upgrades, GitOps or DRA"
    )


def _show(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _h(hours: float) -> str:
    return f"{hours:.4g}"
