"""NVML's return codes by name and by text (issue 26): every code NVML's init or device enumeration returns,
as the components print it, is known to the catalog and mapped to the link it proves broken. The codes come
from a fixture recorded from NVIDIA/go-nvml@v0.12.4-1 (fixtures/nvml-return-codes.yaml), so a code the
header adds to those calls' lists fails here until gpuchain says what it means."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from doctor.small_cluster import diagnosed, no_gpus, plugin_pod

from gpuchain.doctor import Severity, catalog
from gpuchain.doctor.model import FixOp

CODES: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parent / "fixtures" / "nvml-return-codes.yaml").read_text()
)
#: The link each init or enumeration failure proves broken (gpuchain's reading of the header's text).
LINK = {
    "ERROR_LIB_RM_VERSION_MISMATCH": "driver",  # loaded module differs from the libraries: reboot / reload
    "ERROR_DRIVER_NOT_LOADED": "driver",
    "ERROR_LIBRARY_NOT_FOUND": "toolkit",  # the runtime did not inject the driver's libraries
    "ERROR_NO_PERMISSION": "device-plugin",  # the component's own privileges (its own check reports it)
    "ERROR_INSUFFICIENT_POWER": "device-plugin",  # a GPU the plugin cannot announce
    "ERROR_IRQ_ISSUE": "device-plugin",
    "ERROR_GPU_IS_LOST": "device-plugin",
}
#: Codes those calls return that prove no link of the cluster broken: the caller's own misuse of NVML, or
#: (UNKNOWN) words whose meaning depends on the line around them, which the catalog knows by line.
NOT_A_LINK = {"ERROR_UNINITIALIZED", "ERROR_INVALID_ARGUMENT", "ERROR_UNKNOWN"}
#: How components print an NVML failure (each form's source has its catalog entry; the last is any other).
FORMS = (
    "nvml init failed: {}",  # NVIDIA/k8s-device-plugin internal/plugin/manager/factory.go@v0.16.2
    "Failed to initialize NVML: {}.",  # NVIDIA/k8s-device-plugin internal/plugin/factory.go@v0.17.1
    "Cannot init NVML library; err: {}",  # NVIDIA/dcgm-exporter internal/pkg/nvmlprovider/provider.go@4.2.3-4.1.1
    "error enumerating GPUs: {}",
)


def test_every_code_of_init_and_enumeration_has_a_reading() -> None:
    returned = {c["name"] for c in CODES if c["returned_by"]}
    assert returned == set(LINK) | NOT_A_LINK


@pytest.mark.parametrize("name", sorted(LINK))
def test_each_code_is_known_by_name_in_every_components_words(name: str) -> None:
    for form in FORMS:
        found = catalog.known_error(form.format(name))
        assert found is not None, form.format(name)
        assert found.entry.link == LINK[name], (form.format(name), found.entry.id)


@pytest.mark.parametrize("name", sorted(LINK))
def test_each_code_is_known_by_its_text(name: str) -> None:
    (text,) = [c["text"] for c in CODES if c["name"] == name]
    found = catalog.known_error(f"nvml: {text}")
    assert found is not None and found.entry.link == LINK[name], text


def test_a_missing_library_on_a_node_image_stack_is_the_images_driver() -> None:
    found = catalog.known_error("error enumerating GPUs: ERROR_LIBRARY_NOT_FOUND")
    assert found is not None and found.entry.on_node_image == "driver"


def test_the_version_mismatch_by_name_in_a_crashing_plugin_wants_a_reboot() -> None:
    crash = {"name": "nvidia-device-plugin-ctr", "restarts": 6, "state": {"waiting": "CrashLoopBackOff"}}
    log = (
        "E0101 00:00:00.000000 1 main.go:1] error starting plugins: error creating plugin manager: "
        "unable to create plugin manager: nvml init failed: ERROR_LIB_RM_VERSION_MISMATCH\n"
    )
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: m, preset: a100-80gb-x8, hostDriver: 550.54.15}\n",
        no_gpus("m"),
        plugin_pod("m", {**crash, "last": {"terminated": "Error"}}, log),
    )
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link) == ("driver.version-mismatch", "driver")
    assert "catalog: nvml.version-mismatch" in " ".join(root.evidence)
    assert root.action is not None and root.action.op is FixOp.NODE and "reboot" in root.action.changes["action"]
