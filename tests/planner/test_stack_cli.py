"""`gpuchain plan stack` through the real CLI entry point: flags, -o json, --plot, bad input, and the
inputs read from each simulated stack and from a kubectl cluster-info dump of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from matplotlib.image import imread
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.doctor.dump import write_dump
from gpuchain.planner import DriverOwner, StackRequest, plan_stack
from gpuchain.planner.plot import stack_figure
from gpuchain.sim import build, load_scenario

runner = CliRunner()
SELF_MANAGED_100 = ["plan", "stack", "--nodes", "100", "--driver", "self-managed", "--driver-upgrades-per-year", "3"]
CLOUD_8 = ["plan", "stack", "--nodes", "8", "--driver", "cloud-image"]


def _json(args: list[str]) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "-o", "json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_100_self_managed_nodes_table() -> None:
    result = runner.invoke(app, SELF_MANAGED_100, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "by hand    100 h     100 h         400 h" in out
    assert "operator   2 h       2 h           8 h" in out
    assert "By hand / operator: 50x" in out
    assert "Crossover: the operator costs fewer hours from 3 nodes at 3 driver upgrades a year" in out
    assert "Recommended: an operator" in out
    assert "--hours-per-node              1       assumed" in out  # the defaults are stated, not hidden


def test_100_self_managed_nodes_json() -> None:
    data = _json(SELF_MANAGED_100)
    assert (data["byHand"]["yearlyHours"], data["operator"]["yearlyHours"], data["ratio"]) == (400, 8, 50)
    assert data["recommendation"] == "operator"
    assert data["crossover"] == {"nodes": 3, "upgradesPerYear": 0}


def test_8_cloud_image_nodes_get_the_device_plugin_alone() -> None:
    data = _json(CLOUD_8)
    assert data["recommendation"] == "device-plugin"
    assert data["crossover"] == {"nodes": None, "upgradesPerYear": None}
    hours = next(i for i in data["inputs"] if i["flag"] == "--hours-per-node")
    assert (hours["value"], hours["source"]) == ("0", "assumed") and "node image" in hours["evidence"]
    table = runner.invoke(app, CLOUD_8, env={"COLUMNS": "200"}).stdout
    assert "Recommended: the device plugin alone." in table
    assert "Crossover: none at any node count" in table


def test_needs_and_overrides_from_flags() -> None:
    data = _json([*CLOUD_8, "--need", "mig", "--need", "gitops", "--hours-per-node", "0.5"])
    assert data["recommendation"] == "operator"
    assert data["request"]["needs"] == ["mig", "gitops"]
    assert data["byHand"]["yearlyHours"] == 16


def test_plot_draws_both_routes_against_nodes(tmp_path: Path) -> None:
    out = tmp_path / "stack.png"
    result = runner.invoke(app, [*SELF_MANAGED_100, "--plot", str(out), "-o", "json"])
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)
    assert f"wrote {out}" in result.stderr
    assert imread(out).shape[2] in (3, 4)
    (ax,) = stack_figure(plan_stack(StackRequest(nodes=100, driver=DriverOwner.SELF_MANAGED))).axes
    hand, operator = ax.get_lines()[:2]
    assert list(hand.get_ydata())[100] == 400 and set(operator.get_ydata()) == {8}
    assert list(hand.get_xdata())[-1] == 200  # twice the request's nodes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "stack"], "--nodes, --driver required"),
        (
            ["plan", "stack", "--nodes", "-3", "--driver", "self-managed"],
            "--nodes: must be from 1 to 1,000,000 GPU nodes, got -3",
        ),
        ([*CLOUD_8, "--driver-upgrades-per-year", "-1"], "--driver-upgrades-per-year: must be zero or more"),
        ([*CLOUD_8, "--hours-per-node", "-1"], "--hours-per-node: must be zero or more"),
        ([*CLOUD_8, "--plot", "stack.svg"], "must end in .png"),
        (["plan", "stack", "--from-dump", "/nonexistent-dump"], "no such directory"),
        (["plan", "stack", "--from-dump", ".", "--scenario", "healthy"], "pass one of them"),
        (["plan", "stack", "--scenario", "no-such-scenario"], "no-such-scenario"),
        (["plan", "stack", "--from-cluster", "--kubeconfig", "/nonexistent/config"], "no Kubernetes API configuration"),
        (["plan", "stack", "--kubeconfig", "/nonexistent/config"], "tried kubeconfig /nonexistent/config"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stdout == ""


def test_a_bad_driver_owner_is_refused_by_the_parser() -> None:
    result = runner.invoke(app, ["plan", "stack", "--nodes", "8", "--driver", "aws"])
    assert result.exit_code == 2
    assert "cloud-image" in result.output


#: Each simulated stack: who owns its driver, what is recommended, and what was read.
STACKS = {
    "healthy": ("self-managed", "operator", 4),
    "healthy-gpu-operator": ("self-managed", "operator", 3),
    "healthy-nvidia-device-plugin": ("self-managed", "operator", 3),
    "healthy-eks": ("cloud-image", "device-plugin", 3),
    "healthy-aks": ("cloud-image", "device-plugin", 3),
    "healthy-gke": ("cloud-image", "device-plugin", 3),
    "mig-56": ("self-managed", "operator", 2),
    "driver-version-skew": ("self-managed", "operator", 5),
}


@pytest.mark.parametrize("scenario", sorted(STACKS))
def test_inputs_are_read_from_each_simulated_stack(scenario: str) -> None:
    owner, route, nodes = STACKS[scenario]
    data = _json(["plan", "stack", "--scenario", scenario])
    assert (data["request"]["driver"], data["recommendation"], data["request"]["nodes"]) == (owner, route, nodes)
    assert data["readFrom"].startswith(f"scenario {scenario} (simulated): ")
    source = {i["flag"]: i for i in data["inputs"]}
    assert source["--nodes"]["source"] == source["--driver"]["source"] == "read"
    assert source["--driver-upgrades-per-year"]["source"] == "assumed"


def test_what_each_stack_says_is_its_evidence() -> None:
    eks = {i["flag"]: i for i in _json(["plan", "stack", "-s", "healthy-eks"])["inputs"]}
    assert "aws://" in eks["--driver"]["evidence"] and "node image" in eks["--driver"]["evidence"]
    assert eks["--driver-versions"]["source"] == "assumed"  # no feature discovery labels on EKS's plugin alone
    op = {i["flag"]: i for i in _json(["plan", "stack", "-s", "healthy-gpu-operator"])["inputs"]}
    assert "driver in a container" in op["--driver"]["evidence"]
    assert op["--driver-versions"]["source"] == "read" and "570.124.06" in op["--driver-versions"]["evidence"]


def test_mig_in_use_is_read_as_a_need() -> None:
    data = _json(["plan", "stack", "-s", "mig-56"])
    need = next(i for i in data["inputs"] if i["flag"] == "--need")
    assert (need["value"], need["source"]) == ("mig", "read")
    assert "gpu-mig (nvidia.com/mig-1g.10gb: 56)" in need["evidence"]
    assert "MIG manager" in data["reason"]


def test_driver_version_skew_is_read_as_heterogeneity() -> None:
    data = _json(["plan", "stack", "-s", "driver-version-skew", "--nodes", "2"])
    assert data["request"]["driverVersions"] == 2
    assert data["recommendation"] == "device-plugin+gfd+exporter"  # 2 nodes: below the crossover, but mixed
    assert next(i for i in data["inputs"] if i["flag"] == "--nodes")["source"] == "given"


def _kubectl_like(root: Path) -> None:
    """kubectl's Lists carry no apiVersion/kind on their items (clusterpolicies.json is gpuchain's extra)."""
    for path in root.rglob("*.json"):
        if path.name != "clusterpolicies.json":
            data = json.loads(path.read_text())
            for item in data.get("items") or []:
                item.pop("apiVersion", None)
                item.pop("kind", None)
            path.write_text(json.dumps(data))


@pytest.mark.parametrize("scenario", ["healthy-gpu-operator", "healthy-eks", "healthy-gke", "mig-56"])
def test_a_dump_reads_as_the_cluster_it_came_from(tmp_path: Path, scenario: str) -> None:
    write_dump(build(load_scenario(scenario)).cluster, tmp_path)
    _kubectl_like(tmp_path)
    live = _json(["plan", "stack", "--scenario", scenario])
    dump = _json(["plan", "stack", "--from-dump", str(tmp_path)])
    assert dump["readFrom"].startswith(f"dump {tmp_path}: ")
    for key in ("request", "recommendation", "reason", "crossover"):
        assert dump[key] == live[key], key


@pytest.mark.parametrize(
    "extra",
    [
        ["--driver-upgrades-per-year", "1e308"],
        ["--operator-install-hours", "1e308"],
        ["--hours-per-node", "nan"],
        ["--hours-per-node", "inf"],
        ["--nodes", "99999999999999999999"],
        ["--gpu-models", "0"],
    ],
)
def test_out_of_range_numbers_are_one_line_exit_2(extra: list[str]) -> None:
    """Before: 1e308 upgrades a year overflowed into a traceback, 1e308 install hours spun forever."""
    result = runner.invoke(app, [*SELF_MANAGED_100, *extra])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and extra[0] in result.output


@pytest.mark.parametrize("hours", ["1e-300", "0.000001"])
def test_a_node_that_costs_almost_nothing_has_no_crossover_and_answers_at_once(hours: str) -> None:
    """Before: the crossover walked a float up from 1e300 one node at a time and never ended."""
    data = _json([*SELF_MANAGED_100, "--hours-per-node", hours])
    assert data["crossover"]["nodes"] is None
