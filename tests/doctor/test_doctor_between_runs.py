"""A container caught between two runs: the kubelet shows it terminated with an error (the pod's status "Error")
until the back-off ends and it runs again, not yet waiting in CrashLoopBackOff (kubernetes
pkg/kubelet/kuberuntime/kuberuntime_container.go@v1.34.4). Its log is its failure as much as a crash-looping
container's, so the doctor reads it and names what it says rather than "no line of it was collected".
"""

from __future__ import annotations

from doctor.small_cluster import diagnosed, no_gpus, plugin_pod

from gpuchain.doctor.model import Severity

HOST = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, hostDriver: 550.90.07}\n"
#: k8s-device-plugin's lines when its container has no libnvidia-ml (internal/plugin/manager/factory.go@v0.16.2).
NO_NVML = (
    "I0801 15:26:24.781053       1 factory.go:104] Detected non-NVML platform: could not load NVML library: "
    "libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n"
    "E0801 15:26:24.781100       1 main.go:132] error starting plugins: error creating plugin manager: unable to "
    "create plugin manager: platform detection failed\n"
)


def test_the_log_of_a_container_that_exited_with_an_error_is_read() -> None:
    between = {
        "name": "nvidia-device-plugin-ctr",
        "restarts": 6,
        "state": {"terminated": "Error", "exitCode": 2},
        "last": {"terminated": "Error", "exitCode": 2},
    }
    report = diagnosed(HOST, no_gpus("n1"), plugin_pod("n1", between, NO_NVML))
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert root.node == "n1" and "no line of it was collected" not in root.cause
    assert any("could not load NVML library" in e for e in root.evidence)
