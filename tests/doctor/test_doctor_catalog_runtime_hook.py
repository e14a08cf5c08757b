"""nvidia-container-cli's failure kinds and the legacy hook's own refusals (catalog.yaml, read from their source) reach
a GPU workload's finding with the entry's repair, not the runtime wrapper's generic "write the runtime config again":
each is a fact of the node's toolkit or driver install (catalog scope anywhere), so the pod the runtime refused is a
witness for that link.

The stderr lines are the components' formats with sample values: nvidia-container-cli writes "<kind> error: %s"
(NVIDIA/libnvidia-container src/cli/configure.c@09df17a2424704c1e4af310d3ce51fe475ba292a) after its name (glibc's
warnx), with the detail of src/cli/dsl.c@5823754b8577d16fabf25a6ef6a1d58f7ff1e5dd, src/xfuncs.h@13521978755666801855113e6bc4626a36a55c03,
src/ldcache.c@de9f71e76a68e137bce35b1d3182544234caa171, src/nvc_ldcache.c@0f8e13d6627d3ccb45f49cf5d4b9c4103b3a8d01,
src/cgroup.c@02c1d95f0777a758356126b60a9c7e0954028e0d,
src/nvc_mount.c@077f498c209832bc545e2ece46c3a2b7d1ed1e4c, src/error.c (NVML's error string after "nvml error"); the hook's lines are NVIDIA/nvidia-container-toolkit
cmd/nvidia-container-runtime-hook/{main,hook_config,container_config}.go@v1.17.4 (log.Panicln adds nothing before
them); the CDI library's is cncf-tags/container-device-interface pkg/cdi/container-edits_unix.go@v0.8.0 under
the NVIDIA runtime's "error modifying OCI spec" (internal/runtime, v1.17.4). runc wraps each as its prestart hook's
failure (tests/doctor/test_doctor_lower_catalog.py RUNC).
"""

from __future__ import annotations

import pytest
from doctor.small_cluster import crashing_pod, diagnosed, refused_at_start
from test_doctor_lower_catalog import RUNC

from gpuchain.doctor import Severity

CLI = "nvidia-container-cli: "
#: stderr, the entry it is, the link it proves broken, words of the repair.
CASES = [
    (
        CLI + "requirement error: unsatisfied condition: driver>=550",
        "libnvidia-container.driver-requirement",
        "driver",
        "NVIDIA_DISABLE_REQUIRE=true",
    ),
    (
        CLI + "requirement error: invalid expression",
        "libnvidia-container.invalid-requirement",
        "toolkit",
        "NVIDIA_REQUIRE_*",
    ),
    (
        CLI + "detection error: open failed: /run/nvidia/driver/etc/ld.so.cache: no such file or directory",
        "libnvidia-container.ldcache-missing",
        "driver",
        'root = "/"',
    ),
    (
        CLI + "detection error: unsupported file format: /etc/ld.so.cache",
        "libnvidia-container.ldcache-unreadable",
        "driver",
        "run ldconfig",
    ),
    (
        CLI + "ldcache error: process /sbin/ldconfig.real failed with error code: 1",
        "libnvidia-container.ldconfig-failed",
        "toolkit",
        "nvidia-container-cli.ldconfig=@/sbin/ldconfig",
    ),
    (
        CLI + "detection error: nvml error: function not found",
        "libnvidia-container.nvml-function-not-found",
        "driver",
        "leftover libnvidia-ml",
    ),
    (
        CLI + "mount error: invalid device node: /dev/nvidia0",
        "libnvidia-container.invalid-device-node",
        "driver",
        "nvidia-modprobe -c",
    ),
    (
        CLI + "permission error: capability change failed: operation not permitted",
        "libnvidia-container.permission-error",
        "toolkit",
        "hostUsers",
    ),
    (
        CLI + "container error: failed to get device cgroup mount path: no cgroup mount found",
        "libnvidia-container.device-cgroup-path",
        "toolkit",
        "nvidia-container-runtime.mode=cdi",
    ),
    (
        CLI + "initialization error: load library failed: libnvidia-container-go.so.1: cannot open shared object "
        "file: no such file or directory",
        "libnvidia-container.go-helper-missing",
        "toolkit",
        "libnvidia-container1",
    ),
    (
        'couldn\'t find binary nvidia-container-cli in /usr/local/sbin:/usr/bin : exec: "nvidia-container-cli": '
        "executable file not found in $PATH",
        "nvidia-container-toolkit.cli-not-found",
        "toolkit",
        "libnvidia-container-tools",
    ),
    (
        "invoking the NVIDIA Container Runtime Hook directly (e.g. specifying the docker --gpus flag) is not "
        "supported. Please use the NVIDIA Container Runtime (e.g. specify the --runtime=nvidia flag) instead.",
        "nvidia-container-toolkit.hook-invoked-directly",
        "toolkit",
        'mode = "legacy"',
    ),
    (
        "unsupported capabilities found in 'compute,vulkan' (allowed 'compute,utility')",
        "nvidia-container-toolkit.unsupported-capabilities",
        "toolkit",
        "NVIDIA_DRIVER_CAPABILITIES",
    ),
    (
        "cannot set MIG_CONFIG_DEVICES in non privileged container",
        "nvidia-container-toolkit.mig-devices-unprivileged",
        "toolkit",
        "privileged: true",
    ),
    (
        "couldn't open required configuration file: open /etc/nvidia-container-runtime/config.toml: no such file or "
        "directory",
        "nvidia-container-toolkit.config-file-unreadable",
        "toolkit",
        "nvidia-ctk config default",
    ),
    (
        "error modifying OCI spec: failed to inject CDI devices: failed to inject devices: failed to stat CDI host "
        'device "/dev/nvidia-modeset": no such file or directory',
        "cdi.host-device-missing",
        "toolkit",
        "create-device-nodes",
    ),
]
JOB = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1}\nworkloads:\n  - {name: job, gpus: 1, node: n1}\n"


@pytest.mark.parametrize(("stderr", "entry", "link", "repair"), CASES, ids=[c[1] for c in CASES])
def test_a_gpu_pod_the_hook_refuses_gets_the_lines_own_repair(stderr: str, entry: str, link: str, repair: str) -> None:
    report = diagnosed(JOB, refused_at_start("job", RUNC.format(stderr=stderr)))
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.link, root.node) == (link, "n1")
    assert any(e.startswith(f"catalog: {entry} (") for e in root.evidence), root.evidence
    assert repair in root.fix, root.fix


def test_a_toolkit_pod_finding_no_libcuda_of_the_modules_version_is_the_drivers_user_space() -> None:
    """The toolkit container's "error generating CDI specification: %v" (tools/container/toolkit/toolkit.go@v1.17.4)
    around pkg/nvcdi/driver-nvml.go@v1.17.4 "failed to locate libcuda.so.%v: %v" and internal/lookup/file.go's
    "pattern %v not found": the inner words name the driver's missing library, not the toolkit's driver root."""
    log = (
        'time="2026-12-06T12:00:00Z" level=fatal msg="error generating CDI specification: failed to locate '
        'libcuda.so.550.54.15: pattern libcuda.so.550.54.15 not found"\n'
    )
    operator = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n"
    report = diagnosed(
        operator, crashing_pod("nvidia-container-toolkit-daemonset", "nvidia-container-toolkit-ctr", "n1", log)
    )
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.link, root.node) == ("driver", "n1")
    assert any(e.startswith("catalog: nvidia-container-toolkit.libcuda-not-located (") for e in root.evidence)
    assert "libnvidia-compute-<branch>" in root.fix and "NVIDIA_DRIVER_ROOT" not in root.fix
