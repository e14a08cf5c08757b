"""A process's pod and container from its /proc/<pid>/cgroup, in every layout a node can have.

Samples copied from public sources (the file text, unchanged but for trimmed hierarchies):
- V1_CGROUPFS: a public tutorial's ``cat /proc/$REDIS_PID/cgroup`` of a Redis pod (cgroupfs
  driver), found through the code search.
- V1_SYSTEMD_CRIO: a public Go test ``TestK8sCrio_v1_19`` (CRI-O 1.19 on OpenShift 4.6, systemd).
- V1_SYSTEMD_CRIO_STATIC: the same file's ``TestK8sCrio_v1_17`` (a static pod: 32-hex UID).
- V1_CONTAINERD_14: the same file's ``TestK8sContainerd_v1_4_4`` (containerd 1.4.4, systemd,
  the ``slice:cri-containerd:<id>`` form).
- V1_CGROUPFS_CONTAINERD_12: the same file's ``TestK8sContainerd_v1_2_13``.
- V2_SYSTEMD_CONTAINERD: a public Go test's expected cgroup path for container status
  ``containerd://413715dc...`` (cgroup v2, systemd driver).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuchain.exporter.cgroups import ContainerCgroup, parse_cgroup, read_cgroup

V1_CGROUPFS = """\
8:cpu,cpuacct:/kubepods/burstable/podeb1f6abc-474e-45ca-ad02-fad2ac1cfc3f/f007a7ab664298c097876eadcf7dcf04a7bf8ea18dd1340dfceaef8a6d1482e9
7:memory:/kubepods/burstable/podeb1f6abc-474e-45ca-ad02-fad2ac1cfc3f/f007a7ab664298c097876eadcf7dcf04a7bf8ea18dd1340dfceaef8a6d1482e9
"""
V1_SYSTEMD_CRIO = """\
12:devices:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8ca306fa_3c03_47fa_97dd_19979c345572.slice/crio-d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607.scope
6:rdma:/
1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8ca306fa_3c03_47fa_97dd_19979c345572.slice/crio-d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607.scope
"""
V1_SYSTEMD_CRIO_STATIC = """\
7:rdma:/
3:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod487a0dc6dccaeefbcfedba7a7ce1ca18.slice/crio-7a1fd6fe8cdfbd44dc78c4cc85dad7031eaab4365801684cad0aabdeaf863f9e.scope
"""
V1_CONTAINERD_14 = """\
11:pids:/system.slice/containerd.service/kubepods-besteffort-pod2105e389_7471_476e_a50f_6074cef29bbd.slice:cri-containerd:d3d8ccf5cca91931c6285c1d7472c413dd5a7700fddc0aa9f89a9ac7008b003e
10:freezer:/kubepods-besteffort-pod2105e389_7471_476e_a50f_6074cef29bbd.slice:cri-containerd:d3d8ccf5cca91931c6285c1d7472c413dd5a7700fddc0aa9f89a9ac7008b003e
"""
V1_CGROUPFS_CONTAINERD_12 = """\
11:pids:/kubepods/besteffort/poda36d0c1d-0b26-4451-8d80-9c195e004afa/5dd96d5394ca930a854a390ea46f7515a8bc930123eb3251ba20f2708a38fc61
"""
V2_SYSTEMD_CONTAINERD = (
    "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod6553a60b_2b97_442a_b6da_a5704d81dd98.slice/"
    "cri-containerd-413715dc061efe71c16ef989f2f2ff5cf999a7dc905bb7078eda82cbb38210ec.scope\n"
)


@pytest.mark.parametrize(
    ("text", "uid", "container"),
    [
        (
            V1_CGROUPFS,
            "eb1f6abc-474e-45ca-ad02-fad2ac1cfc3f",
            "f007a7ab664298c097876eadcf7dcf04a7bf8ea18dd1340dfceaef8a6d1482e9",
        ),
        (
            V1_SYSTEMD_CRIO,
            "8ca306fa-3c03-47fa-97dd-19979c345572",
            "d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607",
        ),
        (
            V1_SYSTEMD_CRIO_STATIC,
            "487a0dc6dccaeefbcfedba7a7ce1ca18",
            "7a1fd6fe8cdfbd44dc78c4cc85dad7031eaab4365801684cad0aabdeaf863f9e",
        ),
        (
            V1_CONTAINERD_14,
            "2105e389-7471-476e-a50f-6074cef29bbd",
            "d3d8ccf5cca91931c6285c1d7472c413dd5a7700fddc0aa9f89a9ac7008b003e",
        ),
        (
            V1_CGROUPFS_CONTAINERD_12,
            "a36d0c1d-0b26-4451-8d80-9c195e004afa",
            "5dd96d5394ca930a854a390ea46f7515a8bc930123eb3251ba20f2708a38fc61",
        ),
        (
            V2_SYSTEMD_CONTAINERD,
            "6553a60b-2b97-442a-b6da-a5704d81dd98",
            "413715dc061efe71c16ef989f2f2ff5cf999a7dc905bb7078eda82cbb38210ec",
        ),
    ],
    ids=[
        "v1-cgroupfs",
        "v1-systemd-crio",
        "v1-systemd-crio-static-pod",
        "v1-containerd-1.4",
        "v1-cgroupfs-containerd-1.2",
        "v2-systemd-containerd",
    ],
)
def test_pod_and_container_from_every_layout(text: str, uid: str, container: str) -> None:
    assert parse_cgroup(text) == ContainerCgroup(uid, container)


def test_processes_outside_pods_name_none() -> None:
    assert parse_cgroup("0::/system.slice/nvidia-persistenced.service\n") is None
    assert parse_cgroup("0::/\n") is None
    # CRI-O's monitor sits beside the container, in the pod: the pod is known, the container is not it.
    conmon = V1_SYSTEMD_CRIO.replace("crio-d6d7", "crio-conmon-d6d7")
    assert parse_cgroup(conmon) == ContainerCgroup("8ca306fa-3c03-47fa-97dd-19979c345572", None)


def test_read_cgroup_of_a_gone_process_is_none(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(V2_SYSTEMD_CONTAINERD)
    assert read_cgroup(42, tmp_path) == parse_cgroup(V2_SYSTEMD_CONTAINERD)
    assert read_cgroup(43, tmp_path) is None
