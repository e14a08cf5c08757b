"""The validator's driver validation that never completes: what its own logic implies for the evidence seen.

Fixtures: the validator's log lines are its own wording (NVIDIA/gpu-operator validator/main.go@v23.9.0
runCommandWithWait "running command %s with args %v" / "command failed, retrying after %d seconds";
@v25.3.0 "Attempting to validate a driver container installation" / "failed to validate the driver, retrying after
%d seconds"), NVML's error text (NVIDIA/go-nvml pkg/nvml/nvml.h@v0.12.4-1, "Driver/library version mismatch") and
chroot's (GNU coreutils chroot.c: "failed to run command %s"). The cluster shapes follow heldout33's h33-01, h33-02
and h33-05, with other node names, OS releases, driver versions, paths and validator releases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor.model import NOT_SIMULATED, Finding, FixOp, Report, Severity
from gpuchain.doctor.stacks import NVIDIA_CLUSTER_POLICY
from gpuchain.sim.build import SimCluster

#: The validator held at its driver validation (its loop Running), as the kubelet reports it.
HELD = [{"name": "driver-validation", "state": {"running": True}}]
#: The operands that wait for the toolkit's ready file (gpu-operator assets: toolkit-validation init containers).
GATED = ("nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter")

#: v25.3.0's loop over a driver root that holds no driver (logrus' text format).
NOT_FOUND_V25 = (
    'time="2025-08-02T10:01:02Z" level=info msg="Attempting to validate a driver container installation"\n'
    'time="2025-08-02T10:01:02Z" level=warning msg="failed to validate the driver, retrying after 5 seconds\\n"\n'
)


def _held(node: str, log: str | None = None) -> list[dict[str, Any]]:
    """Edits: the validator on ``node`` held at driver-validation (its log ``log``), the gated operands waiting."""
    validator: dict[str, Any] = {
        "do": "pod",
        "daemonset": "nvidia-operator-validator",
        "node": node,
        "phase": "Pending",
        "init": HELD,
    }
    if log is not None:
        validator["logs"] = {"driver-validation": log}
    waits = [
        {
            "do": "pod",
            "daemonset": ds,
            "node": node,
            "phase": "Pending",
            "init": [{"name": "toolkit-validation", "state": {"running": True}}],
        }
        for ds in GATED
    ]
    return [validator, *waits]


def _install_dir(path: str) -> Callable[[SimCluster], None]:
    """An edit: NVIDIA's ClusterPolicy with ``spec.hostPaths.driverInstallDir`` set as a user's Helm values set it
    (hostPaths.driverInstallDir; the simulator's own policy schema does not take the key)."""

    def edit(sim: SimCluster) -> None:
        for policy in sim.cluster.list(NVIDIA_CLUSTER_POLICY):
            patch = {"spec": {"hostPaths": {"driverInstallDir": path}}}
            sim.cluster.patch(NVIDIA_CLUSTER_POLICY, name=policy["metadata"]["name"], patch=patch)

    return edit


def _root(report: Report, node: str) -> Finding:
    (root,) = [f for f in report.findings if f.root and f.node == node and f.severity is Severity.ERROR]
    return root


def test_nvml_mismatch_in_the_validators_own_log_is_the_drivers_version_mismatch() -> None:
    """A host driver whose module and libraries disagree: the validator's nvidia-smi says so in the init container it
    keeps running, and that log is read (not only a crashing container's), so the mismatch names its repair."""
    log = (
        "running command chroot with args [/host nvidia-smi]\n"
        "Failed to initialize NVML: Driver/library version mismatch\n"
        "NVML library version: 550.144\n"
        "command failed, retrying after 5 seconds\n"
    )
    report = diagnosed(
        "name: x\nstack: gpu-operator\npolicy: {driver: {enabled: false}}\n"
        "nodes:\n  - {name: worker-a100-2, preset: a100-80gb-x8, hostDriver: '550.127.05'}\n",
        *_held("worker-a100-2", log),
    )
    root = _root(report, "worker-a100-2")
    assert (root.id, root.link) == ("driver.version-mismatch", "driver")
    assert any("driver-validation" in e for e in root.evidence)
    assert "reboot the node" in root.fix and "delete pod nvidia-operator-validator-" in root.fix


def test_a_driver_install_dir_override_with_the_operators_driver_is_dropped() -> None:
    """The operator installs the driver under /run/nvidia/driver, and hostPaths.driverInstallDir moves only the
    validation's driver root: the override is dropped, whatever the validator's release words its loop."""
    for path, log in (
        ("/opt/nvidia/driver", NOT_FOUND_V25),
        (
            "/home/kubernetes/bin/nvidia/",
            "running command chroot with args [/home/kubernetes/bin/nvidia nvidia-smi]\n"
            "chroot: failed to run command 'nvidia-smi': No such file or directory\n",
        ),
    ):
        report = diagnosed(
            "name: x\nstack: gpu-operator\nnodes:\n  - {name: gpu-node-7, preset: l4-x2}\n",
            _install_dir(path),
            *_held("gpu-node-7", log),
        )
        root = _root(report, "gpu-node-7")
        assert (root.id, root.link) == ("driver.not-validated", "driver")
        assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
        assert root.action.changes == {"spec": {"hostPaths": {"driverInstallDir": None}}}
        assert '"driverInstallDir":null' in root.fix and path.rstrip("/") in root.cause


def test_the_default_driver_root_keeps_the_validators_restart() -> None:
    """Healthy variant: no override (or the default written out) names nothing to drop: the validator is run again,
    as before."""
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: gpu-node-7, preset: l4-x2}\n",
        _install_dir("/run/nvidia/driver/"),
        *_held("gpu-node-7", NOT_FOUND_V25),
    )
    root = _root(report, "gpu-node-7")
    assert root.action is not None and root.action.op is FixOp.DELETE and NOT_SIMULATED in root.action.changes
    assert "hostPaths" not in root.fix


def test_a_host_driver_on_talos_gets_the_markers_or_the_standalone_plugin() -> None:
    """driver.enabled=false on Talos: its extensions keep the driver's files under /usr/local, where the validator
    finds neither nvidia-smi at /usr/bin nor the libraries under any driver root, so only the ready files (the
    toolkit's left to its own enabled container) or a plugin that does not wait for them let the operands start."""
    report = diagnosed(
        "name: x\nstack: gpu-operator\npolicy: {driver: {enabled: false}}\n"
        "nodes:\n  - {name: talos-w3, preset: l4-x2, hostDriver: '550.144.03', osImage: Talos (v1.9.5)}\n",
        *_held("talos-w3"),
    )
    root = _root(report, "talos-w3")
    assert (root.id, root.link) == ("driver.not-validated", "driver")
    assert "/run/nvidia/validations/driver-ready" in root.fix and "toolkit-ready" not in root.fix
    assert "standalone device plugin" in root.fix and "Talos v1.9.5" in root.cause
    assert root.action is not None and root.action.op is FixOp.NODE


def test_a_host_driver_under_a_managed_images_root_points_the_validation_there() -> None:
    """driver.enabled=false on a GKE node whose image installs the driver (gpu-driver-version=latest): the
    validation looks under the image's driver root once hostPaths.driverInstallDir names it."""
    report = diagnosed(
        "name: x\nstack: gpu-operator\npolicy: {driver: {enabled: false}}\nnodes:\n"
        "  - {name: gke-pool-b-1a2b, preset: l4-x2, hostDriver: '535.230.02', osImage: Container-Optimized OS from "
        "Google, labels: {cloud.google.com/gke-gpu-driver-version: latest}}\n",
        *_held("gke-pool-b-1a2b", NOT_FOUND_V25),
    )
    root = _root(report, "gke-pool-b-1a2b")
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes == {"spec": {"hostPaths": {"driverInstallDir": "/home/kubernetes/bin/nvidia"}}}


def test_a_host_driver_elsewhere_names_the_key_and_the_layout_the_validator_searches() -> None:
    """driver.enabled=false on a plain node: no directory gpuchain knows, so the fix names the key and what the
    validator looks for under it (validator/find.go@v25.3.0), with no command."""
    report = diagnosed(
        "name: x\nstack: gpu-operator\npolicy: {driver: {enabled: false}}\n"
        "nodes:\n  - {name: rtx-box, preset: l4-x2, hostDriver: '570.86.15', osImage: Rocky Linux 9.4 (Blue Onyx)}\n",
        *_held("rtx-box", NOT_FOUND_V25),
    )
    root = _root(report, "rtx-box")
    assert root.action is None and root.fix.startswith("# set spec.hostPaths.driverInstallDir")
    assert "libnvidia-ml.so.1" in root.fix


def test_a_host_driver_that_runs_and_fails_in_other_words_is_not_called_missing() -> None:
    """The host's nvidia-smi was found and ran (its chroot into /host): words the catalog does not know are the
    driver's, not a driver missing, so no host path is named."""
    report = diagnosed(
        "name: x\nstack: gpu-operator\npolicy: {driver: {enabled: false}}\n"
        "nodes:\n  - {name: rtx-box, preset: l4-x2, hostDriver: '570.86.15'}\n",
        *_held(
            "rtx-box",
            "running command chroot with args [/host nvidia-smi]\n"
            "Unable to determine the device handle for GPU0000:00:1E.0: Unknown Error\n"
            "command failed, retrying after 5 seconds\n",
        ),
    )
    root = _root(report, "rtx-box")
    assert "hostPaths" not in root.fix and root.action is not None and root.action.op is FixOp.DELETE


def test_a_validator_past_its_driver_validation_reads_no_log_and_stays_quiet() -> None:
    """Healthy: every validation completed on a host-driver node; nothing is held, nothing is read or reported."""
    report = diagnosed(
        "name: x\nstack: gpu-operator\npolicy: {driver: {enabled: false}}\n"
        "nodes:\n  - {name: talos-w3, preset: l4-x2, hostDriver: '550.144.03', osImage: Talos (v1.9.5)}\n"
    )
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_the_toolkits_own_driver_validation_log_is_read_where_no_validator_runs() -> None:
    """The toolkit's driver-validation runs the same check (nvidia-validator, COMPONENT=driver, WITH_WAIT=true:
    gpu-operator assets/state-container-toolkit/0500_daemonset.yaml@v25.3.0): with the validator kept off the node,
    its log is the witness of the mismatch."""
    log = (
        'time="2025-11-20T07:44:10Z" level=info msg="Attempting to validate a pre-installed driver on the host"\n'
        "Failed to initialize NVML: Driver/library version mismatch\n"
        "NVML library version: 570.133\n"
        'time="2025-11-20T07:44:10Z" level=warning msg="failed to validate the driver, retrying after 5 seconds\\n"\n'
    )
    toolkit = {
        "do": "pod",
        "daemonset": "nvidia-container-toolkit-daemonset",
        "node": "dgx-b-04",
        "phase": "Pending",
        "init": HELD,
        "logs": {"driver-validation": log},
    }
    opted = {"do": "node", "node": "dgx-b-04", "labels": {"nvidia.com/gpu.deploy.operator-validator": "false"}}
    report = diagnosed(
        "name: x\nstack: gpu-operator\npolicy: {driver: {enabled: false}}\n"
        "nodes:\n  - {name: dgx-b-04, preset: h100-80gb-x8, hostDriver: '570.124.06'}\n",
        opted,
        toolkit,
    )
    root = _root(report, "dgx-b-04")
    assert (root.id, root.link) == ("driver.version-mismatch", "driver")
    assert any("nvidia-container-toolkit-daemonset" in e for e in root.evidence)
