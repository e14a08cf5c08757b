"""NVIDIADriver conditions: the GPU Operator's driver CRD says why it deployed no driver.

The controller (NVIDIA/gpu-operator ``controllers/nvidiadriver_controller.go@v25.10.1``) stops a
reconcile on an error and records it as two conditions (``internal/conditions/nvidiadriver.go``):
``Ready=False`` (reason ``Error``) and ``Error=True`` with the reason and message. Two NVIDIADrivers
whose node selectors share a node both stop with reason ``ConflictingNodeSelector`` and the message
of ``internal/validator/validator.go``: "conflicting NVIDIADriver NodeSelectors found for resource:
%s, nodeSelector: %q". No driver DaemonSet is made for either, so nothing above the driver starts.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from gpuchain.doctor import run_doctor
from gpuchain.doctor.stacks import NVIDIA_DRIVER
from gpuchain.kube import DAEMONSET, POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim import build, load_scenario

SAMPLE = Path(__file__).parent / "fixtures" / "gpu-operator-nvidia_v1alpha1_nvidiadriver.yaml"


def _driver(name: str, created: str, node_selector: dict[str, str] | None, error: tuple[str, str] | None) -> Any:
    obj = copy.deepcopy(yaml.safe_load(SAMPLE.read_text()))
    obj["metadata"] = {"name": name, "creationTimestamp": created}
    if node_selector is None:
        obj["spec"].pop("nodeSelector", None)
    else:
        obj["spec"]["nodeSelector"] = node_selector
    if error is not None:
        reason, message = error
        obj["status"] = {
            "state": "notReady",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "Error", "message": ""},
                {"type": "Error", "status": "True", "reason": reason, "message": message},
            ],
        }
    return obj


def _without_driver_daemonset() -> Any:
    sim = build(load_scenario("healthy-gpu-operator"))
    for ds in sim.cluster.list(DAEMONSET):
        if name_of(ds) == "nvidia-driver-daemonset":
            sim.cluster.delete(DAEMONSET, name_of(ds), namespace_of(ds))
    for pod in sim.cluster.list(POD):
        if name_of(pod).startswith("nvidia-driver-daemonset"):
            sim.cluster.delete(POD, name_of(pod), namespace_of(pod))
    return sim


def test_two_nvidiadrivers_selecting_the_same_nodes_are_the_root_and_the_newer_one_goes() -> None:
    sim = _without_driver_daemonset()
    message = 'conflicting NVIDIADriver NodeSelectors found for resource: {}, nodeSelector: "map[]"'
    sim.cluster.create(
        _driver("default", "2026-01-01T00:00:00Z", None, ("ConflictingNodeSelector", message.format("default")))
    )
    sim.cluster.create(_driver("gold", "2026-03-01T00:00:00Z", {}, ("ConflictingNodeSelector", message.format("gold"))))
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert [g.id for g in report.root_causes] == ["driver.nvidiadriver-conflict"], report.ids()
    finding = next(f for f in report.findings if f.id == "driver.nvidiadriver-conflict")
    assert "default" in finding.cause and "gold" in finding.cause
    assert any("ConflictingNodeSelector" in e for e in finding.evidence)
    assert finding.fix.startswith("kubectl delete nvidiadriver gold")


def test_an_nvidiadriver_that_selects_other_nodes_is_not_blamed() -> None:
    sim = _without_driver_daemonset()
    sim.cluster.create(
        _driver("elsewhere", "2026-01-01T00:00:00Z", {"pool": "other"}, ("ReconcileFailed", "Error syncing state"))
    )
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert not any(f.id.startswith("driver.nvidiadriver") for f in report.findings)


def test_a_failed_reconcile_is_quoted_and_the_fix_edits_that_nvidiadriver() -> None:
    sim = _without_driver_daemonset()
    failure = "Error syncing state state-driver: failed to get image path: image repository is required"
    sim.cluster.create(_driver("default", "2026-01-01T00:00:00Z", None, ("ReconcileFailed", failure)))
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert [g.id for g in report.root_causes] == ["driver.nvidiadriver-error"], report.ids()
    finding = next(f for f in report.findings if f.id == "driver.nvidiadriver-error")
    assert any(failure in e for e in finding.evidence)
    assert NVIDIA_DRIVER.kind == "NVIDIADriver"
    assert finding.fix.startswith("kubectl edit nvidiadriver default")
