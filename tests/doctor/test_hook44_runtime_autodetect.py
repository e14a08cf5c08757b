"""k3s and RKE2 without a toolkit pod: their containerd gets its nvidia runtime from their own start, where they find
the binary (k3s-io/k3s pkg/agent/containerd/runtimes.go@080ec81 findNvidiaContainerRuntimes: /usr/local/nvidia/toolkit,
/usr/bin; @cd1fadb: exec.LookPath on the service's PATH, the October 2024 patch releases, k3s-io/k3s#10998), and
render config.toml from config.toml.tmpl at each start (docs.rke2.io advanced, "Configuring containerd"). The
sandbox Event is containerd's (internal/cri "no runtime for %q is configured") in the kubelet's FailedCreatePodSandBox
wording; node names, versions and paths are made up.
"""

from __future__ import annotations

import pytest
from doctor.small_cluster import diagnosed

from gpuchain.doctor.model import Finding, Report, Severity

PLUGIN = (
    "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: n1, preset: l4-x2, hostDriver: 550.90.07, "
    "distribution: {dist}}}\nworkloads:\n  - {{name: serve, namespace: default, count: 1}}\n"
)
SANDBOX = {
    "do": "pod",
    "daemonset": "nvidia-device-plugin-daemonset",
    "node": "n1",
    "phase": "Pending",
    "containers": [{"name": "nvidia-device-plugin-ctr", "ready": False, "state": {"waiting": "ContainerCreating"}}],
    "events": [
        {
            "reason": "FailedCreatePodSandBox",
            "count": 7,
            "message": "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: "
            'no runtime for "nvidia" is configured',
        }
    ],
}


def _finding(report: Report) -> Finding:
    (found,) = [f for f in report.findings if f.id == "toolkit.runtime-not-configured"]
    assert found.severity is Severity.ERROR and found.node == "n1"
    return found


@pytest.mark.parametrize(("dist", "config"), [("rke2", "/var/lib/rancher/rke2"), ("k3s", "/var/lib/rancher/k3s")])
def test_k3s_and_rke2_are_told_to_let_their_own_start_find_the_runtime(dist: str, config: str) -> None:
    fix = _finding(diagnosed(PLUGIN.format(dist=dist), SANDBOX)).fix
    assert f"{config}/agent/etc/containerd/config.toml.tmpl" in fix
    assert "ln -s" in fix and "/usr/local/nvidia/toolkit" in fix and "PATH" in fix
    assert f"{dist}-killall.sh" in fix
    # An edit of the file the service renders again is lost: not the repair offered.
    assert "nvidia-ctk runtime configure" not in fix


def test_kubeadm_keeps_its_own_containerd_config_repair() -> None:
    fix = _finding(diagnosed(PLUGIN.format(dist="kubeadm"), SANDBOX)).fix
    assert "nvidia-ctk runtime configure --runtime=containerd --config=/etc/containerd/config.toml" in fix
    assert "config.toml.tmpl" not in fix


def test_a_serving_rke2_node_stays_quiet() -> None:
    report = diagnosed(PLUGIN.format(dist="rke2"))
    assert [f.id for f in report.findings if f.severity is Severity.ERROR] == []
