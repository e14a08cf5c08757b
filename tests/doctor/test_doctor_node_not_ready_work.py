"""What brings a NotReady node back, read from the node and the pods on it rather than one answer for every node:

- a node of a cloud node group (spec.providerID aws:// / gce:// / azure://, or its provisioner's label where a dump
  lost the providerID: Karpenter's karpenter.sh/nodepool, EKS's eks.amazonaws.com/nodegroup, GKE's
  cloud.google.com/gke-nodepool, AKS's kubernetes.azure.com/agentpool) that does not come back is replaced by the
  group, not power-cycled through a BMC it does not have;
- NVIDIA's MIG manager stops the host's GPU client services around a layout change and logs each one as
  "Stopping %s (active, will-restart)" (NVIDIA/mig-parted, the MIG manager's host GPU clients); kubelet.service
  among them is what took the node's kubelet down, and the next MIG change does it again unless kubelet leaves
  that list or the layout is applied before the kubelet starts.
"""

from __future__ import annotations

from doctor.small_cluster import diagnosed

from gpuchain.doctor.model import Finding, Report

NODE = "{{name: m1, preset: a100-40gb-x8, nodeProblems: [kubelet-stopped], labels: {{{labels}}}}}"
SCENARIO = "name: t\nstack: gpu-operator\npolicy: {{mig: {{strategy: mixed}}}}\nnodes:\n  - " + NODE + "\n"
MIG_LOG = (
    'time="2026-04-29T08:11:03Z" level=info msg="Updating to MIG config: all-1g.5gb"\n'
    "Shutting down all GPU clients on the host by stopping their systemd services\n"
    "Stopping kubelet.service (active, will-restart)\n"
)


def _not_ready(report: Report) -> Finding:
    (found,) = [f for f in report.findings if f.id == "node.not-ready"]
    assert found.root and found.node == "m1"
    return found


def _mig_log(text: str) -> dict[str, object]:
    return {"do": "pod", "daemonset": "nvidia-mig-manager", "node": "m1", "logs": {"nvidia-mig-manager": text}}


def test_a_node_of_a_node_group_that_does_not_come_back_is_replaced() -> None:
    found = _not_ready(diagnosed(SCENARIO.format(labels="karpenter.sh/nodepool: gpu")))
    assert "replace the instance" in found.fix and "kubectl delete node m1" in found.fix
    assert "BMC" not in found.fix
    bare = _not_ready(diagnosed(SCENARIO.format(labels="rack: r7")))
    assert "BMC" in bare.fix and "replace the instance" not in bare.fix


def test_a_mig_manager_that_stopped_the_kubelet_is_named_with_the_way_to_keep_it_from_doing_so_again() -> None:
    found = _not_ready(diagnosed(SCENARIO.format(labels="rack: r7"), _mig_log(MIG_LOG)))
    assert any(e.endswith("said: Stopping kubelet.service (active, will-restart)") for e in found.evidence)
    assert "take kubelet.service out of its host GPU clients" in found.fix
    assert "nvidia.com/gpu.deploy.mig-manager=false" in found.fix
    # A MIG manager that stopped only the GPU's own clients did not stop the kubelet.
    other = MIG_LOG.replace("kubelet.service", "nvidia-dcgm.service")
    quiet = _not_ready(diagnosed(SCENARIO.format(labels="rack: r7"), _mig_log(other)))
    assert "kubelet.service out" not in quiet.fix
