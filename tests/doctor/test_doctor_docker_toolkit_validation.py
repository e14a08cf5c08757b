"""The validator's toolkit validation failing on a node whose kubelet runs pods through Docker: the repair is Docker's
default runtime (``"default-runtime": "nvidia"`` in /etc/docker/daemon.json), not containerd's config.

The validator runs nvidia-smi in its own container and says "toolkit is not ready" where it is missing
(NVIDIA/gpu-operator validator/main.go@v1.11.1 ``Toolkit.validate``); through Docker every pod runs under Docker's
default runtime, so with the operator's toolkit turned off (toolkit.enabled=false) the host's Docker must default to
nvidia (NVIDIA/deepops#381). Node names, OS releases, Docker and validator versions are made up; the containerd node
is the quiet half: its repair stays containerd's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import diagnosed
from sim.heldout9 import harness as ninth

from gpuchain.doctor.model import Finding, Report, Severity
from gpuchain.sim.build import SimCluster

NOT_READY = (
    "toolkit is not ready\n"
    'time="2024-03-11T08:00:01Z" level=info msg="Error: error validating toolkit installation: exec: \\"nvidia-smi\\": '
    'executable file not found in $PATH"\n'
)


def _cluster(runtime: str, *, toolkit: bool) -> str:
    """A GPU Operator cluster (driver on the host, the toolkit ``toolkit`` on or off) of one four-GPU node whose
    kubelet reports the container runtime ``runtime``."""
    return (
        "name: t\nstack: gpu-operator\nnamespace: nvidia-gpu-operator\n"
        f"policy: {{driver: {{enabled: false}}, toolkit: {{enabled: {str(toolkit).lower()}}}}}\n"
        "nodes:\n"
        f"  - {{name: rack4-gpu2, preset: t4-x4, hostDriver: '550.127.05', osImage: Ubuntu 22.04.4 LTS, containerRuntime: '{runtime}'}}\n"
        "  - {name: rack4-cp, gpu: false}\n"
    )


def _edit(edit: dict[str, Any]) -> Callable[[SimCluster], None]:
    """A held-out edit in heldout9's format (which knows ``add-pod``) as a function of the simulation."""
    return lambda sim: ninth._apply(sim.cluster, edit)


def _toolkit_not_ready(node: str = "rack4-gpu2") -> list[Callable[[SimCluster], None]]:
    """Edits: the validator's toolkit-validation crash-looping with ``NOT_READY``, the device plugin waiting on it."""
    edits: list[dict[str, Any]] = [
        {
            "do": "add-pod",
            "namespace": "nvidia-gpu-operator",
            "name": "nvidia-operator-validator-k2x9d",
            "node": node,
            "labels": {"app": "nvidia-operator-validator", "app.kubernetes.io/part-of": "gpu-operator"},
            "image": "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v1.11.1",
            "init": ["driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation"],
            "containers": ["nvidia-operator-validator"],
        },
        {
            "do": "pod",
            "daemonset": "nvidia-operator-validator",
            "node": node,
            "init": [
                {"name": "driver-validation", "ready": True, "state": {"terminated": "Completed", "exitCode": 0}},
                {
                    "name": "toolkit-validation",
                    "state": {"waiting": "CrashLoopBackOff"},
                    "restarts": 12,
                    "last": {"terminated": "Error", "exitCode": 1},
                },
            ],
            "logs": {"toolkit-validation": NOT_READY},
        },
        {
            "do": "pod",
            "daemonset": "nvidia-device-plugin-daemonset",
            "node": node,
            "init": [{"name": "toolkit-validation", "state": {"running": True}}],
        },
    ]
    return [_edit(e) for e in edits]


def _root(report: Report) -> Finding:
    (root,) = [f for f in report.findings if f.root and f.node == "rack4-gpu2" and f.severity is Severity.ERROR]
    return root


def test_a_docker_node_with_the_operators_toolkit_off_makes_nvidia_dockers_default() -> None:
    root = _root(diagnosed(_cluster("docker://24.0.7", toolkit=False), *_toolkit_not_ready()))
    assert root.link == "toolkit"
    assert '"default-runtime": "nvidia" in /etc/docker/daemon.json' in root.fix
    assert "nvidia-ctk runtime configure --runtime=docker --set-as-default" in root.fix
    assert "toolkit.enabled=true" in root.fix and "containerd" not in root.fix
    # Docker's default comes first: what the missing nvidia-smi's shape says only where Docker defaults to nvidia.
    assert root.fix.index("daemon.json") < root.fix.index("where nvidia is Docker's default already")


def test_a_docker_node_whose_operator_runs_the_toolkit_restarts_it_and_still_repairs_docker() -> None:
    root = _root(diagnosed(_cluster("docker://24.0.7", toolkit=True), *_toolkit_not_ready()))
    assert root.link == "toolkit" and "daemon.json" in root.fix
    assert "toolkit.enabled=true" not in root.fix  # the operator deploys it already


def test_a_containerd_node_keeps_containerds_repair() -> None:
    root = _root(diagnosed(_cluster("containerd://1.7.20", toolkit=False), *_toolkit_not_ready()))
    assert root.link == "toolkit"
    assert "containerd" in root.fix and "daemon.json" not in root.fix and "Docker" not in root.fix
