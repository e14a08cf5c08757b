"""The simulator's evidence for the log-derived fixes is what NVIDIA's components print, as quoted in
the upstream reports named here; the doctor quotes those lines and acts on them."""

from __future__ import annotations

import pytest

from gpuchain.doctor import run_doctor
from gpuchain.sim import build, load_scenario

#: (scenario, finding id, the line as the report quotes it, report)
QUOTED = [
    (
        "op-toolkit-k3s-socket",
        "toolkit.not-ready",
        "Error signaling containerd, attempt",  # "... attempt 5/6: unable to dial: dial unix
        # /runtime/sock-dir/containerd.sock: connect: no such file or directory" in both reports
        "NVIDIA/gpu-operator#522, #406",
    ),
    (
        "op-driver-secure-boot",
        "driver.not-ready",
        "ERROR: The kernel module failed to load, because it was not signed by a key that is trusted by the kernel. "
        "Please try installing the driver again, and sign the kernel module when prompted to do so.",
        "NVIDIA/gpu-operator#266",
    ),
    (
        "op-plugin-inotify",
        "device-plugin.not-ready",
        "Error: failed to create FS watcher: too many open files",
        "NVIDIA/gpu-operator#441",
    ),
    (
        "dp-registration-lost",
        "device-plugin.not-registered",
        "Registered device plugin for 'nvidia.com/gpu' with Kubelet",
        "NVIDIA/k8s-device-plugin#1228",
    ),
]


@pytest.mark.parametrize(("scenario", "fid", "line", "report"), QUOTED, ids=[q[0] for q in QUOTED])
def test_the_doctor_quotes_the_upstream_line(scenario: str, fid: str, line: str, report: str) -> None:
    sim = build(load_scenario(scenario))
    found = next(f for f in run_doctor(sim.cluster, reader=sim.read_log).findings if f.id == fid)
    assert any(line in e for e in found.evidence), (report, found.evidence)
    assert found.action is not None, f"{fid}: the line names the cause, so the fix is data"
