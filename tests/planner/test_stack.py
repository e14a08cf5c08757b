"""Device plugin alone or an operator: the worked figures (100 self-managed nodes, 8 cloud-image
nodes), the crossover, the votes that override hours, and where each input came from."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuchain.planner import (
    DriverOwner,
    Need,
    PlanInputError,
    Reading,
    Route,
    StackRequest,
    plan_stack,
    resolve,
)
from gpuchain.planner.stack import costs, crossover

SELF, CLOUD = DriverOwner.SELF_MANAGED, DriverOwner.CLOUD_IMAGE


def test_100_self_managed_nodes_cost_400_hours_by_hand_and_8_with_an_operator() -> None:
    p = plan_stack(StackRequest(nodes=100, driver=SELF, driver_upgrades_per_year=3))
    assert (p.by_hand.install_hours, p.by_hand.hours_per_upgrade, p.by_hand.yearly_hours) == (100, 100, 400)
    assert (p.operator.install_hours, p.operator.hours_per_upgrade, p.operator.yearly_hours) == (2, 2, 8)
    assert p.ratio == 50
    assert p.recommendation is Route.OPERATOR
    assert "400 hours a year by hand against 8 with an operator (50x)" in p.reason
    assert (p.crossover.nodes, p.crossover.upgrades_per_year) == (3, 0)


def test_8_cloud_image_nodes_need_the_device_plugin_alone() -> None:
    p = plan_stack(StackRequest(nodes=8, driver=CLOUD))
    assert p.recommendation is Route.DEVICE_PLUGIN
    assert (p.by_hand.yearly_hours, p.operator.yearly_hours, p.ratio) == (0, 8, 0)
    assert p.crossover.nodes is None and p.crossover.upgrades_per_year is None
    assert "one more control plane" in p.reason
    assert "driver.enabled" not in p.setup and "device plugin DaemonSet" in p.setup


def test_node_count_is_not_the_deciding_variable() -> None:
    """The same 1,000 nodes: the cloud's image keeps them by hand, a self-managed driver needs the operator."""
    assert plan_stack(StackRequest(nodes=1000, driver=CLOUD)).recommendation is Route.DEVICE_PLUGIN
    assert plan_stack(StackRequest(nodes=1000, driver=SELF)).recommendation is Route.OPERATOR


def test_a_cloud_image_that_costs_time_per_node_gets_a_crossover() -> None:
    p = plan_stack(StackRequest(nodes=8, driver=CLOUD, hours_per_node=0.25))
    assert p.by_hand.yearly_hours == 8 and p.operator.yearly_hours == 8
    assert p.recommendation is Route.DEVICE_PLUGIN  # a tie is not a reason for one more control plane
    assert p.crossover.nodes == 9


def test_few_self_managed_nodes_stay_by_hand_until_the_crossover() -> None:
    below = plan_stack(StackRequest(nodes=2, driver=SELF))
    assert below.recommendation is Route.DEVICE_PLUGIN
    assert "the operator pays from 3 nodes" in below.reason
    assert plan_stack(StackRequest(nodes=3, driver=SELF)).recommendation is Route.OPERATOR


def test_upgrades_crossover_at_a_fixed_node_count() -> None:
    # 2 nodes x 1 h against an install of 2 h and 1 h a change: by hand 2 + 2u, operator 2 + u
    req = StackRequest(nodes=2, driver=SELF, operator_install_hours=2, operator_hours_per_change=1)
    assert crossover(req).upgrades_per_year == 1
    assert (
        plan_stack(
            StackRequest(nodes=2, driver=SELF, driver_upgrades_per_year=0, operator_hours_per_change=1)
        ).recommendation
        is Route.DEVICE_PLUGIN
    )
    assert (
        plan_stack(
            StackRequest(nodes=2, driver=SELF, driver_upgrades_per_year=1, operator_hours_per_change=1)
        ).recommendation
        is Route.OPERATOR
    )


@given(
    nodes=st.integers(1, 500),
    hours=st.floats(0.01, 10),
    upgrades=st.floats(0, 12),
    install=st.floats(0, 100),
    change=st.floats(0, 20),
)
def test_the_crossover_is_where_the_operator_first_costs_less(
    nodes: int, hours: float, upgrades: float, install: float, change: float
) -> None:
    req = StackRequest(
        nodes=nodes,
        driver=SELF,
        driver_upgrades_per_year=upgrades,
        hours_per_node=hours,
        operator_install_hours=install,
        operator_hours_per_change=change,
    )
    cross = crossover(req)
    assert cross.nodes is not None

    def cheaper(n: int, u: float = upgrades) -> bool:
        hand, op = costs(
            StackRequest(
                nodes=n,
                driver=SELF,
                driver_upgrades_per_year=u,
                hours_per_node=hours,
                operator_install_hours=install,
                operator_hours_per_change=change,
            )
        )
        return op.yearly_hours < hand.yearly_hours

    assert cheaper(cross.nodes) and not cheaper(cross.nodes - 1)
    if cross.upgrades_per_year is not None:
        assert cheaper(nodes, cross.upgrades_per_year)
        assert cross.upgrades_per_year == 0 or not cheaper(nodes, cross.upgrades_per_year - 1)
    else:
        assert not any(cheaper(nodes, u) for u in range(50))


@pytest.mark.parametrize("need", list(Need))
def test_each_need_is_a_vote_for_the_operator_whatever_the_hours(need: Need) -> None:
    p = plan_stack(StackRequest(nodes=8, driver=CLOUD, needs=(need,)))
    assert p.recommendation is Route.OPERATOR
    assert "whatever the hours" in p.reason
    assert "--set driver.enabled=false" in p.setup  # the node image keeps its driver


@pytest.mark.parametrize(("models", "versions"), [(2, 1), (1, 2)])
def test_a_mixed_fleet_gets_feature_discovery_and_the_exporter(models: int, versions: int) -> None:
    p = plan_stack(StackRequest(nodes=8, driver=CLOUD, gpu_models=models, driver_versions=versions))
    assert p.recommendation is Route.PLUGIN_GFD_EXPORTER
    assert "mixed" in p.reason and "gfd.enabled=true" in p.setup


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": -1}, "--nodes: must be from 1 to 1,000,000 GPU nodes, got -1"),
        ({"nodes": 0}, "--nodes: must be from 1"),
        ({"driver_upgrades_per_year": -1}, "--driver-upgrades-per-year: must be zero or more"),
        ({"hours_per_node": -0.5}, "--hours-per-node: must be zero or more"),
        ({"operator_install_hours": float("nan")}, "--operator-install-hours"),
        ({"operator_hours_per_change": -2}, "--operator-hours-per-change"),
        ({"gpu_models": 0}, "--gpu-models: must be from 1"),
        ({"driver_versions": 0}, "--driver-versions: must be from 1"),
    ],
)
def test_out_of_range_inputs_name_the_flag(kwargs: dict[str, float], message: str) -> None:
    base: dict[str, object] = {"nodes": 8, "driver": CLOUD}
    with pytest.raises(PlanInputError, match=message):
        plan_stack(StackRequest(**{**base, **kwargs}))  # type: ignore[arg-type]


def _reading(**kw: object) -> Reading:
    base: dict[str, object] = {
        "where": "dump d",
        "stack": "NVIDIA GPU Operator",
        "nodes": 12,
        "nodes_evidence": "12 of 14 nodes have NVIDIA GPUs",
        "driver": SELF,
        "driver_evidence": "driver container",
    }
    return Reading(**{**base, **kw})  # type: ignore[arg-type]


def test_resolve_says_which_inputs_were_given_read_or_assumed() -> None:
    reading = _reading(gpu_models=("A100", "H100"), gpu_models_evidence="GPU models: ...", mig_nodes=("g1",))
    req, inputs = resolve({"driver_upgrades_per_year": 4.0, "needs": [Need.GITOPS]}, reading)
    assert (req.nodes, req.driver, req.gpu_models, req.driver_upgrades_per_year) == (12, SELF, 2, 4)
    assert req.needs == (Need.MIG, Need.GITOPS)
    source = {i.flag: i.source for i in inputs}
    assert source == {
        "--nodes": "read",
        "--driver": "read",
        "--driver-upgrades-per-year": "given",
        "--hours-per-node": "assumed",
        "--operator-install-hours": "assumed",
        "--operator-hours-per-change": "assumed",
        "--need": "read",
        "--gpu-models": "read",
        "--driver-versions": "assumed",
    }
    need = next(i for i in inputs if i.flag == "--need")
    assert need.value == "mig, gitops" and "the rest given" in need.evidence


def test_a_flag_given_wins_over_what_the_cluster_says() -> None:
    req, inputs = resolve({"nodes": 100, "driver": CLOUD}, _reading())
    assert (req.nodes, req.driver, req.hours_per_node) == (100, CLOUD, 0)
    assert [i.source for i in inputs[:2]] == ["given", "given"]
    hours = next(i for i in inputs if i.flag == "--hours-per-node")
    assert "node image" in hours.evidence


@pytest.mark.parametrize(
    ("given_", "reading", "message"),
    [
        ({}, None, "--nodes, --driver required"),
        ({"nodes": 4}, None, "--driver required"),
        ({}, _reading(nodes=0, nodes_evidence="0 of 3 nodes"), "dump d has no GPU nodes"),
    ],
)
def test_inputs_neither_given_nor_read_are_refused(
    given_: dict[str, object], reading: Reading | None, message: str
) -> None:
    with pytest.raises(PlanInputError, match=message):
        resolve(given_, reading)
