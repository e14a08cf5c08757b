"""A CUDA validation whose CUDA says the driver is too old is the driver link's failure (links/validator_cuda.py).

Fixtures: the message is the CUDA runtime's cudaErrorInsufficientDriver string as NVIDIA's vectorAdd sample prints it
(NVIDIA/cuda-samples Samples/0_Introduction/vectorAdd/vectorAdd.cu@v12.8, catalog.yaml cuda.insufficient-driver); the
validator's CUDA base image libraries removed in v22.9.0 (NVIDIA/gpu-operator validator/Dockerfile@v22.9.0, commit
47b730016); the Kepler boards' newest driver branch is 470 (NVIDIA's driver release notes: R470 is the last branch that
supports Kepler). Node names, versions and GPUs are this test's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from doctor.small_cluster import crash_looping

from gpuchain.doctor import Report, Severity, run_doctor
from gpuchain.doctor.links.validator_cuda import validation_proves

INSUFFICIENT = "[Vector addition of 50000 elements]\nFailed to allocate device vector A (error code {})!\n"
KEPLER = {
    "nvidia.com/gpu.product": "Tesla-K40m",
    "nvidia.com/gpu.family": "kepler",
    "nvidia.com/gpu.compute.major": "3",
    "nvidia.com/gpu.compute.minor": "5",
    "nvidia.com/cuda.driver.major": "470",
    "nvidia.com/cuda.driver.minor": "199",
    "nvidia.com/cuda.driver.rev": "02",
}


def _validator(tmp_path: Path, *, node: str, release: str, log: str | None) -> Report:
    """A GPU Operator ``release`` cluster whose node ``node`` (a Kepler GPU on a host driver 470) runs the CUDA
    validation: failing with ``log``, or done where ``log`` is None."""
    done = log is None
    validation: dict[str, Any] = (
        {"name": "cuda-validation", "state": {"terminated": "Completed", "exitCode": 0}}
        if done
        else crash_looping("cuda-validation", restarts=7)
    )
    doc = {
        "name": "t",
        "source": "gpuchain#0",
        "kind": "fault",
        "base": {
            "stack": "gpu-operator",
            "namespace": "gpu-operator",
            "policy": {"driver": {"enabled": False}, "validator": {"version": release}},
            "nodes": [{"name": node, "preset": "t4-x4", "hostDriver": "470.199.02"}],
        },
        "edits": [
            {"do": "node", "node": node, "labels": KEPLER},
            {
                "do": "add-pod",
                "namespace": "gpu-operator",
                "name": "nvidia-cuda-validator-x7m4p",
                "node": node,
                "labels": {"app": "nvidia-cuda-validator"},
                "image": f"nvcr.io/nvidia/cloud-native/gpu-operator-validator:{release}",
                "init": ["cuda-validation"],
                "containers": ["nvidia-cuda-validator"],
            },
            {
                "do": "pod",
                "daemonset": "nvidia-cuda-validator",
                "namespace": "gpu-operator",
                "node": node,
                **({"phase": "Succeeded"} if done else {}),
                "init": [validation],
                "logs": {"cuda-validation": "Test PASSED\n" if done else log},
            },
        ],
        "expect": {"root": "none"},
    }
    from sim.heldout9 import harness

    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(doc))
    case = harness.load(path)
    return run_doctor(case.cluster, reader=case.read_log)


def _errors(report: Report) -> list[Any]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def test_an_affected_validator_release_names_the_operator_release_that_removed_its_cuda_libraries(
    tmp_path: Path,
) -> None:
    """Another release (v1.10.1), node and wording (the cudaError_t name) than any report: the driver link, on that
    node, repaired by the GPU Operator release whose validator image keeps the driver's own CUDA libraries."""
    report = _validator(
        tmp_path, node="kepler-b2", release="v1.10.1", log=INSUFFICIENT.format("cudaErrorInsufficientDriver")
    )
    (root,) = _errors(report)
    assert (root.id, root.link, root.node) == ("driver.validation-failed", "driver", "kepler-b2"), report.ids()
    assert "v22.9.0" in root.fix and "GPU Operator" in root.fix
    assert any("validator/Dockerfile@v22.9.0" in e for e in root.evidence)


def test_a_fixed_validator_release_keeps_the_driver_link_with_the_catalog_repair(tmp_path: Path) -> None:
    """A release that already drops the base image's libraries (v23.9.1): still the driver's, but no operator upgrade
    is offered, only the catalog's repair (a driver branch the CUDA release supports)."""
    text = INSUFFICIENT.format("CUDA driver version is insufficient for CUDA runtime version")
    report = _validator(tmp_path, node="gpu-old-3", release="v23.9.1", log=text)
    (root,) = _errors(report)
    assert (root.link, root.node) == ("driver", "gpu-old-3"), report.ids()
    assert "v22.9.0" not in root.fix and "upgrade the node's driver" in root.fix


def test_a_validation_that_passed_stays_quiet(tmp_path: Path) -> None:
    report = _validator(tmp_path, node="kepler-b2", release="v1.11.1", log=None)
    assert not _errors(report), report.ids()


def test_only_cuda_saying_the_driver_is_too_old_moves_a_validation_to_the_driver() -> None:
    """Another CUDA error, or a line no entry knows, leaves the validation on the link it stands for."""
    too_old = INSUFFICIENT.format("CUDA driver version is insufficient for CUDA runtime version")
    assert validation_proves(too_old, "toolkit") == "driver"
    assert validation_proves(INSUFFICIENT.format("no CUDA-capable device is detected"), "toolkit") == "toolkit"
    assert validation_proves("something nobody wrote down\n", "toolkit") == "toolkit"
    assert validation_proves(too_old, None) is None
