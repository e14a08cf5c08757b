"""A Juju LXD worker with no GPU device passed into its machine (issue 26): the runtime hook's libnvidia-container
finds no device ("nvidia-container-cli: initialization error: ..."), so the node, not the toolkit or the driver, is
repaired, with LXD's GPU device on the machine."""

from __future__ import annotations

from pathlib import Path

from doctor.small_cluster import diagnosed_case
from sim.heldout9 import harness as ninth

from gpuchain.doctor import Severity, run_doctor
from gpuchain.kube import NODE

REFUSED = (
    "OCI runtime create failed: runc create failed: unable to start container process: error during container init: "
    "error running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\\n"
    "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown"
)


def _case(worker: str, *, refused: bool = True) -> str:
    state = (
        f'lastState: {{terminated: {{reason: StartError, exitCode: 128, message: "{REFUSED}"}}}}'
        if refused
        else "state: {running: {startedAt: '2025-03-01T10:00:00Z'}}"
    )
    return f"""name: lxd
source: test
base:
  stack: nvidia-device-plugin
  nodes:
    - {{name: {worker}, preset: l4-x2, hostDriver: "550.127.05", containerRuntime: "containerd://1.7.24", labels: {{juju-application: k8s-worker}}}}
    - {{name: cp-1, gpu: false, labels: {{juju-application: k8s}}}}
edits:
  - {{do: node, node: {worker}, nodeInfo: {{kubeletVersion: v1.31.4}}}}
  - do: create
    object:
      apiVersion: v1
      kind: Pod
      metadata: {{name: trainer-0, namespace: ml}}
      spec:
        nodeName: {worker}
        containers: [{{name: trainer, image: "nvcr.io/nvidia/pytorch:24.08-py3", resources: {{limits: {{nvidia.com/gpu: "1"}}}}}}]
      status:
        phase: Running
        containerStatuses:
          - {{name: trainer, ready: {"false" if refused else "true"}, restartCount: {5 if refused else 0}, {state}}}
expect:
  root: none
"""


def test_a_juju_lxd_container_worker_without_the_gpu_device_is_the_node_given_the_device(tmp_path: Path) -> None:
    report = diagnosed_case(tmp_path, _case("juju-7c41fe-4-lxd-2"))
    (found,) = [f for f in report.findings if f.id == "node.lxd-gpu-not-passed"]
    assert (found.link, found.severity, found.node) == ("node", Severity.ERROR, "juju-7c41fe-4-lxd-2")
    assert "lxc config device add juju-7c41fe-4-lxd-2 gpu gpu" in found.fix and "ml/trainer-0" in found.fix
    assert "workload.runtime-hook-failed" not in report.ids


def test_a_juju_worker_on_a_cloud_with_a_provider_id_is_not_taken_for_an_lxd_machine(tmp_path: Path) -> None:
    path = tmp_path / "case.yaml"
    path.write_text(_case("juju-7c41fe-4"))
    case = ninth.load(path)
    case.cluster.patch(NODE, name="juju-7c41fe-4", patch={"spec": {"providerID": "openstack:///3f1c2a9e"}})
    report = run_doctor(case.cluster, reader=case.read_log)
    assert "node.lxd-gpu-not-passed" not in report.ids and "workload.runtime-hook-failed" in report.ids


def test_a_worker_named_by_its_own_host_is_not_taken_for_an_lxd_machine(tmp_path: Path) -> None:
    report = diagnosed_case(tmp_path, _case("gpu-rack3-07"))
    assert "node.lxd-gpu-not-passed" not in report.ids


def test_an_lxd_worker_whose_gpu_pods_run_is_quiet(tmp_path: Path) -> None:
    report = diagnosed_case(tmp_path, _case("juju-7c41fe-4", refused=False))
    assert "node.lxd-gpu-not-passed" not in report.ids
    assert not [f for f in report.findings if f.severity == Severity.ERROR]
