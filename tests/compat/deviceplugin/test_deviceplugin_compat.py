"""NVIDIA's own device plugin config files announce what NVIDIA's plugin would announce.

Every file under ``fixtures/`` is NVIDIA's (see ``fixtures/SOURCES.md``: k8s-device-plugin v0.20.0,
gpu-operator v26.7.0's e2e sharing config, and two "Running with config" logs quoted in public
threads). Each case runs the file through
``gpuchain device-plugin --list --config-file FILE`` (the start-up path: environment, NVIDIA's
naming rule, the resource mapping) on a simulated node and compares the resources and device
counts with what NVIDIA's plugin announces for that file on that node.

The expected figures are worked out from upstream's documented semantics, not from gpuchain:

- ``a100-40gb-x8``: 8 whole A100-SXM4-40GB, no MIG ("a node with 8 GPUs" in NVIDIA's README).
- ``h100-80gb-x8-mig-mixed``: GPUs 0-3 MIG with 2x 1g.10gb + 2g.20gb + 3g.40gb, GPUs 4-5 MIG
  with 7x 1g.10gb, GPUs 6-7 whole. Mixed: 2 ``nvidia.com/gpu``, 4*2 + 2*7 = 22 ``mig-1g.10gb``,
  4 ``mig-2g.20gb``, 4 ``mig-3g.40gb``; none: 8 ``nvidia.com/gpu``; single: refused (more than
  one profile, NVIDIA's plugin fails to start).
- ``a100-40gb-x8-all-1g.5gb`` (``tests/compat/nodes``): 8 A100 each with 7x 1g.5gb; single:
  56 ``nvidia.com/gpu``.

``UPSTREAM_ONLY`` lists the cases where gpuchain deliberately differs, with the reason; the
compatibility figure in docs/device-plugin.md is computed from this table (see the last test).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuchain.api.config.v1.config import parse_config
from gpuchain.api.config.v1.durations import INFINITE_NS
from gpuchain.cli import app
from gpuchain.common.yamlfile import ConfigFileError

HERE = Path(__file__).parent
FIX = HERE / "fixtures"
NODES = HERE.parent / "nodes"
DOCS = HERE.parents[2] / "docs" / "device-plugin.md"

A100_X8 = "a100-40gb-x8"
H100_MIG_MIXED = "h100-80gb-x8-mig-mixed"
A100_ALL_1G = "a100-40gb-x8-all-1g.5gb"

REFUSED = "refused"
Outcome = dict[str, int] | str


@dataclass(frozen=True)
class Case:
    """One NVIDIA file on one node: NVIDIA's outcome, and gpuchain's where it deliberately differs."""

    file: str
    node: str
    upstream: Outcome
    why: str
    gpuchain: Outcome | None = None
    trim_ellipsis: bool = False
    says: str = ""
    """For a refusal: text gpuchain's one-line error must contain (the reason, not just any failure)."""

    @property
    def expected(self) -> Outcome:
        return self.upstream if self.gpuchain is None else self.gpuchain

    @property
    def id(self) -> str:
        return f"{self.file}{'(without ...)' if self.trim_ellipsis else ''}@{self.node}"


G = "nvidia.com/gpu"
MIXED = {G: 2, "nvidia.com/mig-1g.10gb": 22, "nvidia.com/mig-2g.20gb": 4, "nvidia.com/mig-3g.40gb": 4}
NO_RESOURCES_IN_SHARING = (
    "NVIDIA's reader refuses a sharing section without resources ('no resources specified'), "
    "including the 'timeSlicing: {}' its own log prints; gpuchain reads an empty timeSlicing as unset "
    "so the JSON NVIDIA logs loads back"
)

CASES = [
    Case("readme/config-file.yaml", A100_X8, {G: 8}, "migStrategy none: one nvidia.com/gpu per GPU"),
    Case("readme/config-file.yaml", H100_MIG_MIXED, {G: 8}, "migStrategy none ignores MIG: 8 GPUs"),
    Case("readme/dp-example-config0.yaml", A100_X8, {G: 8}, "migStrategy none"),
    Case("readme/dp-example-config1.yaml", A100_X8, {G: 8}, "mixed without MIG: whole GPUs"),
    Case("readme/dp-example-config1.yaml", H100_MIG_MIXED, MIXED, "mixed: one resource per profile"),
    Case("helm-values/default.yaml", A100_X8, {G: 8}, "migStrategy none"),
    Case("helm-values/mig-single.yaml", A100_ALL_1G, {G: 56}, "single: 8 x 7 1g.5gb as nvidia.com/gpu"),
    Case(
        "helm-values/mig-single.yaml",
        H100_MIG_MIXED,
        REFUSED,
        "single with several profiles fails start",
        says="more than one MIG profile",
    ),
    Case("helm-values/mig-mixed.yaml", H100_MIG_MIXED, MIXED, "mixed: one resource per profile"),
    Case("readme/time-slicing.yaml", A100_X8, {G: 80}, "README: 8 GPUs advertise 80 nvidia.com/gpu"),
    Case("gpu-operator/plugin-config.yaml", A100_X8, {G: 80}, "10 replicas x 8 GPUs under the name nvidia.com/gpu"),
    Case(
        "readme/time-slicing-rename-by-default.yaml",
        A100_X8,
        REFUSED,
        "the README's '...' line is not YAML",
        says="not valid YAML",
    ),
    Case(
        "readme/time-slicing-rename-by-default.yaml",
        A100_X8,
        {G + ".shared": 80},
        "README: 80 nvidia.com/gpu.shared",
        trim_ellipsis=True,
    ),
    Case("readme/mps.yaml", A100_X8, {G: 80}, "README: 80 nvidia.com/gpu (MPS_ROOT set, as NVIDIA's chart does)"),
    Case(
        "readme/mps-rename-by-default.yaml",
        A100_X8,
        REFUSED,
        "the README's '...' line is not YAML",
        says="not valid YAML",
    ),
    Case(
        "readme/mps-rename-by-default.yaml",
        A100_X8,
        {G + ".shared": 80},
        "README: 80 nvidia.com/gpu.shared",
        trim_ellipsis=True,
    ),
    Case(
        "readme/time-slicing-options.yaml",
        A100_X8,
        REFUSED,
        "the README's '...' line is not YAML",
        says="not valid YAML",
    ),
    Case(
        "readme/time-slicing-options.yaml",
        A100_X8,
        REFUSED,
        "a template: '<bool>' is not a bool, '<resource-name>' not a resource name",
        trim_ellipsis=True,
        says="renameByDefault",
    ),
    Case("readme/mps-options.yaml", A100_X8, REFUSED, "the README's '...' line is not YAML", says="not valid YAML"),
    Case(
        "readme/mps-options.yaml",
        A100_X8,
        REFUSED,
        "a template: '<bool>' is not a bool",
        trim_ellipsis=True,
        says="renameByDefault",
    ),
    Case(
        "logged/plugin-running-config-zalando-pr8468.json",
        A100_X8,
        REFUSED,
        NO_RESOURCES_IN_SHARING,
        gpuchain={G: 8},
    ),
    Case(
        "logged/gfd-running-config-nvkind-issue20.json",
        A100_X8,
        REFUSED,
        NO_RESOURCES_IN_SHARING,
        gpuchain={G: 8},
    ),
]

ENV = {"MPS_ROOT": "/run/nvidia/mps"}
"""What NVIDIA's Helm chart sets on the plugin container that matters here (mps.root)."""


def _text(case: Case) -> str:
    text = (FIX / case.file).read_text()
    if case.trim_ellipsis:
        lines = text.splitlines(keepends=True)
        assert lines[-1].strip() == "...", "trim_ellipsis is only for the README's trailing '...' line"
        text = "".join(lines[:-1])
    return text


def _node_args(node: str) -> list[str]:
    topology = NODES / f"{node}.yaml"
    return ["--topology", str(topology)] if topology.exists() else ["--preset", node]


def announce(path: Path, node: str) -> tuple[Outcome, str]:
    """What ``gpuchain device-plugin`` announces for ``path`` on ``node`` (resource -> device
    count, or REFUSED) and what it printed."""
    args = ["device-plugin", "--list", "-o", "json", "--config-file", str(path), *_node_args(node)]
    result = CliRunner().invoke(app, args, env=ENV)
    if result.exit_code == 2:
        assert "\n" not in result.output.strip(), f"a refusal is one line: {result.output}"
        return REFUSED, result.output
    assert result.exit_code == 0, result.output
    return {row["resource"]: row["devices"] for row in json.loads(result.stdout)}, result.output


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_nvidia_example_announces_what_nvidia_would(case: Case, tmp_path: Path) -> None:
    path = tmp_path / Path(case.file).name
    path.write_text(_text(case))
    outcome, output = announce(path, case.node)
    assert outcome == case.expected, case.why
    assert case.says in output


def test_every_fixture_config_is_covered() -> None:
    files = {str(p.relative_to(FIX)) for p in FIX.rglob("*") if p.suffix in (".yaml", ".json")}
    files.discard("api-cases.yaml")
    assert files == {c.file for c in CASES}


def compatibility() -> tuple[int, int]:
    """(cases with NVIDIA's outcome, all cases) of this suite's file table."""
    return sum(c.gpuchain is None for c in CASES), len(CASES)


def test_docs_state_the_measured_figure() -> None:
    same, total = compatibility()
    text = DOCS.read_text()
    match = re.search(r"(\d+) of (\d+) NVIDIA\s+file/node\s+cases", text)
    assert match, "docs/device-plugin.md states the compatibility figure"
    assert (int(match.group(1)), int(match.group(2))) == (same, total)
    inputs = re.search(r"The (\d+) inputs of NVIDIA's\s+`api/config/v1`\s+unit\s+tests", text)
    assert inputs and int(inputs.group(1)) == len(API["cases"])


# --- the unit-test inputs of NVIDIA's api/config/v1 package (fixtures/api-cases.yaml) ---

API = yaml.safe_load((FIX / "api-cases.yaml").read_text())


def _config_text(case: dict[str, Any]) -> str:
    """The upstream test input placed where it sits in a config file."""
    value = case["value"]
    if case["at"] == "file":
        return str(value)
    inner = yaml.safe_load(value)
    resource = dict(API["base"]["resource"])
    if case["at"] == "devices":
        doc: dict[str, Any] = {"sharing": {"timeSlicing": {"resources": [{**resource, "devices": inner}]}}}
    elif case["at"] == "resource":
        doc = {"sharing": {"timeSlicing": {"resources": [inner]}}}
    elif case["at"] == "timeSlicing":
        doc = {"sharing": {"timeSlicing": inner}}
    else:
        doc = {case["at"]: inner}
    return json.dumps(doc)


@pytest.mark.parametrize("case", API["cases"], ids=lambda c: f"{c['test']}:{c['value'][:60]}")
def test_nvidia_api_test_inputs_have_nvidias_outcome(case: dict[str, Any]) -> None:
    text = _config_text(case)
    if not case["accepted"]:
        with pytest.raises(ConfigFileError) as err:
            parse_config(text, "config.json")
        assert "\n" not in str(err.value)
        return
    config = parse_config(text, "config.json")
    if "sleep_ns" in case:
        want = INFINITE_NS if case["sleep_ns"] == "infinite" else case["sleep_ns"]
        assert config.flags.gfd.sleep_interval == want
    if "device_list" in case:
        assert [s.value for s in config.flags.plugin.device_list_strategy] == case["device_list"]
    if "fail_requests_greater_than_one" in case:
        _, settings = config.replication or ("", None)
        assert settings is not None
        assert settings.fail_requests_greater_than_one is case["fail_requests_greater_than_one"]
