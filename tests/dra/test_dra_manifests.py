"""Every DRA object gpuchain ships or renders validates against Kubernetes 1.34 and 1.36 (strict)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from gpuchain.dra import slices
from gpuchain.dra.claims import resource_claim
from gpuchain.dra.kinds import DRIVER, device_class, whole_gpu_class
from gpuchain.gpu.sim import SimBackend

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "dra").glob("*.yaml"))
TEMPLATE = ROOT / "charts" / "gpuchain" / "templates" / "dra-deviceclass.yaml"
KUBE_VERSIONS = ("1.34.0", "1.36.0")
_REF = re.compile(r"device\.(attributes|capacity)\['" + re.escape(DRIVER) + r"'\]\.(\w+)")


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def _render_chart(tmp: Path, values: dict[str, Any]) -> dict[str, str]:
    """Render the DeviceClass template alone, in a throwaway chart, as `helm template` would."""
    chart = tmp / "gpuchain"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: gpuchain\nversion: 0.1.0\n")
    shutil.copy(TEMPLATE, chart / "templates" / TEMPLATE.name)
    rendered: dict[str, str] = helm_python.Chart.load(chart).render(values, name="gpuchain", namespace="gpu")
    return {k: v for k, v in rendered.items() if v.strip()}


def test_examples_cover_the_four_claims() -> None:
    names = {_load(p)["metadata"]["name"] for p in EXAMPLES if _load(p)["kind"] == "ResourceClaimTemplate"}
    assert names == {"any-gpu", "h100-80gb", "two-gpus-same-numa", "mig-1g10gb"}


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate(path: Path, version: str) -> None:
    kubernetes_validate.validate(_load(path), version, strict=True)


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_rendered_objects_validate(version: str, mig_sim: SimBackend) -> None:
    rendered = slices.resource_slice("n", devices=slices.render_devices(mig_sim.inventory()), generation=3)
    claim = resource_claim("c", namespace="default", count=2, cel="device.driver == 'x'")
    for obj in (device_class(), whole_gpu_class(), claim, rendered):
        kubernetes_validate.validate(obj, version, strict=True)


def test_example_selectors_name_published_attributes(mig_sim: SimBackend) -> None:
    """A typo in a CEL attribute name would match nothing; every name used must be published."""
    published = slices.render_devices(mig_sim.inventory())
    attributes = {k for d in published for k in d["attributes"]}
    capacity = {k for d in published for k in d["capacity"]}
    used = [m for p in EXAMPLES for m in _REF.findall(p.read_text())]
    assert used
    for section, name in used:
        assert name in (attributes if section == "attributes" else capacity), f"{section} {name!r} is not published"
    numa = _load(ROOT / "examples" / "dra" / "two-gpus-same-numa.yaml")["spec"]["spec"]["devices"]["constraints"][0]
    assert numa["matchAttribute"] == f"{DRIVER}/numaNode" and "numaNode" in attributes


def test_h100_memory_is_over_80g_but_under_80gi(h100_sim: SimBackend) -> None:
    """Why the H100 example says 80G: the published capacity sits between 80G and 80Gi."""
    memory = slices.render_devices(h100_sim.inventory())[0]["capacity"]["memory"]["value"]
    mib = int(memory.removesuffix("Mi"))
    assert 80 * 10**9 <= mib * 2**20 < 80 * 2**30
    assert "quantity('80G')" in (ROOT / "examples" / "dra" / "h100-80gb.yaml").read_text()


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_chart_device_class(tmp_path: Path, version: str) -> None:
    assert _render_chart(tmp_path / "off", {}) == {}
    assert _render_chart(tmp_path / "false", {"dra": {"enabled": False}}) == {}
    (text,) = _render_chart(tmp_path / "on", {"dra": {"enabled": True}}).values()
    obj = yaml.safe_load(text)
    kubernetes_validate.validate(obj, version, strict=True)
    assert obj["metadata"]["name"] == device_class()["metadata"]["name"]
    assert obj["spec"] == device_class()["spec"]


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_chart_whole_gpu_class_is_opt_in_and_the_same_object(tmp_path: Path, version: str) -> None:
    """dra.extendedResource adds whole-gpu.gpuchain.io, exactly the class the real scheduler serves
    ``nvidia.com/gpu`` through in tests/peers/test_dra_extended_resource.py."""
    off = _render_chart(tmp_path / "off", {"dra": {"enabled": True}, "devicePlugin": {"enabled": False}})
    assert len(list(yaml.safe_load_all(next(iter(off.values()))))) == 1
    on = {"dra": {"enabled": True, "extendedResource": True}, "devicePlugin": {"enabled": False}}
    (text,) = _render_chart(tmp_path / "on", on).values()
    main, bridge = yaml.safe_load_all(text)
    for obj in (main, bridge):
        kubernetes_validate.validate(obj, version, strict=True)
    assert main["spec"] == device_class()["spec"]  # the class of claims is untouched
    assert bridge["metadata"]["name"] == whole_gpu_class()["metadata"]["name"]
    assert bridge["spec"] == whole_gpu_class()["spec"]
    assert bridge["spec"]["extendedResourceName"] == "nvidia.com/gpu"


def test_whole_gpu_class_selects_whole_gpus_only(mig_sim: SimBackend) -> None:
    """``nvidia.com/gpu: 1`` is a whole GPU: the class's type selector matches the published GPUs, not
    their MIG devices."""
    published = slices.render_devices(mig_sim.inventory())
    types = {d["attributes"]["type"]["string"] for d in published}
    assert types == {"gpu", "mig"}
    assert f"device.attributes['{DRIVER}'].type == 'gpu'" in [
        s["cel"]["expression"] for s in whole_gpu_class()["spec"]["selectors"]
    ]
