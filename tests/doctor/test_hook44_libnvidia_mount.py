"""The legacy hook's mount step failing on a path the driver's state gave it (catalog.yaml, hook44 block).

nvidia-container-cli copies the kernel module's /proc/driver/nvidia files (params, version, registry) into each GPU
container and bind-mounts the device nodes it reads from the driver (NVIDIA/libnvidia-container
src/nvc_mount.c@077f498c209832bc545e2ece46c3a2b7d1ed1e4c mount_procfs, mount_device); xstat and xmount name the path
they failed on (src/xfuncs.h@13521978755666801855113e6bc4626a36a55c03 "stat failed: %s", "mount operation failed:
%s") after configure.c's "mount error: %s" (src/cli/configure.c@09df17a2424704c1e4af310d3ce51fe475ba292a). The
stderr lines below are those formats with sample values, wrapped as runc's prestart hook failure under containerd
(tests/doctor/test_doctor_lower_catalog.py RUNC) or under Docker's 2019 wording (runc 1.0.0-rc8's
process_linux.go "running prestart hook %d caused %q", its OCI create error as dockerd passes it on).
"""

from __future__ import annotations

import pytest
from doctor.small_cluster import diagnosed, refused_at_start
from test_doctor_lower_catalog import RUNC

from gpuchain.doctor import Finding, Report, Severity
from gpuchain.doctor.catalog import known_error

CLI = "nvidia-container-cli: mount error: "
#: Docker 18.09/19.03's wording of runc's prestart hook failure (the kubelet's message of a dockershim node).
DOCKER = (
    'OCI runtime create failed: container_linux.go:345: starting container process caused "process_linux.go:430: '
    'container init caused \\"process_linux.go:413: running prestart hook 1 caused \\\\\\"error running hook: exit '
    'status 1, stdout: , stderr: {stderr}\\\\\\\\n\\\\\\"\\"": unknown'
)
JOB = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1}\n  - {name: n2}\nworkloads:\n  - {name: job, gpus: 1, node: n1}\n"
PROCFS = "libnvidia-container.procfs-mount-failed"
MISPARSED = "libnvidia-container.misparsed-device-path"


def _root(report: Report) -> list[tuple[str, str | None]]:
    return [(f.link, f.node) for f in report.findings if f.root and f.severity is Severity.ERROR]


def _only_root(report: Report, entry: str) -> Finding:
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert any(e.startswith(f"catalog: {entry} (") for e in root.evidence), root.evidence
    return root


@pytest.mark.parametrize(
    ("wrapper", "path"),
    [
        (RUNC, "/run/containerd/io.containerd.runtime.v2.task/k8s.io/9a1f/rootfs/proc/driver/nvidia/registry"),
        (DOCKER, "/data/docker/overlay2/77ab/merged/proc/driver/nvidia/params/version/registry"),
        (DOCKER, "/var/lib/docker/overlay2/77ab/merged/proc/driver/nvidia/params"),
    ],
    ids=["containerd-registry", "docker-custom-root", "docker-params"],
)
def test_a_missing_proc_driver_file_is_the_loaded_modules_and_a_reboot_repairs(wrapper: str, path: str) -> None:
    message = wrapper.format(stderr=f"{CLI}mount operation failed: {path}: no such file or directory")
    root = _only_root(diagnosed(JOB, refused_at_start("job", message)), PROCFS)
    assert (root.link, root.node) == ("driver", "n1")
    assert "reboot the node" in root.fix


@pytest.mark.parametrize("model", ["GeForce", "Quadro", "TITAN"])
def test_a_root_level_name_the_hook_stats_is_its_own_parse_and_an_upgrade_repairs(model: str) -> None:
    message = DOCKER.format(stderr=f"{CLI}stat failed: /{model}: no such file or directory")
    root = _only_root(diagnosed(JOB, refused_at_start("job", message)), MISPARSED)
    assert (root.link, root.node) == ("toolkit", "n1")
    assert "upgrade libnvidia-container" in root.fix and "libnvidia-container-tools" in root.fix


@pytest.mark.parametrize("node", ["/dev/nvidia-uvm", "/dev/nvidia3", "/dev/nvidiactl"])
def test_a_device_node_the_driver_never_made_is_the_drivers(node: str) -> None:
    """Not a misparse: the node lies under /dev, where the driver (its module, nvidia-modprobe) makes it."""
    message = RUNC.format(stderr=f"{CLI}stat failed: {node}: no such file or directory")
    root = _only_root(diagnosed(JOB, refused_at_start("job", message)), "libnvidia-container.device-node-missing")
    assert (root.link, root.node) == ("driver", "n1")
    assert "create-device-nodes" in root.fix


@pytest.mark.parametrize(
    "line",
    [
        # A library the linker cache names and the disk lacks: a path under a directory as well.
        CLI + "stat failed: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1: no such file or directory",
    ],
)
def test_a_path_under_a_directory_is_not_taken_for_a_misparse(line: str) -> None:
    said = known_error(line)
    assert said is None or said.entry.id not in (MISPARSED, PROCFS)


def test_two_nodes_each_get_their_own_repair() -> None:
    """gpu-a's hook misreads a model name, gpu-b's module is stale: two roots, two repairs, not one."""
    scenario = (
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1}\n  - {name: n2}\nworkloads:\n"
        "  - {name: ja, gpus: 1, node: n1}\n  - {name: jb, gpus: 1, node: n2}\n"
    )
    stat = DOCKER.format(stderr=f"{CLI}stat failed: /Tesla: no such file or directory")
    proc = RUNC.format(stderr=f"{CLI}mount operation failed: /r/proc/driver/nvidia/version: no such file or directory")
    report = diagnosed(scenario, refused_at_start("ja", stat), refused_at_start("jb", proc))
    assert sorted(_root(report)) == [("driver", "n2"), ("toolkit", "n1")]


def test_a_healthy_node_stays_quiet() -> None:
    assert _root(diagnosed(JOB)) == []
