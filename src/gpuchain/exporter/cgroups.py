"""Which pod and container a process runs in, from its ``/proc/<pid>/cgroup``.

The kubelet puts every container in a cgroup under the pod's, and names the pod's after its UID;
the container runtime names the container's after its ID. The spelling depends on the cgroup
version, the kubelet's cgroup driver and the runtime (the samples in tests/exporter/test_cgroups.py
are copied from public sources, noted there):

- v1 or v2, cgroupfs driver: ``/kubepods/burstable/pod<uid>/<container id>``
- v1 or v2, systemd driver, containerd:
  ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope``
- the same with CRI-O: ``.../crio-<id>.scope``; with cri-dockerd: ``.../docker-<id>.scope``
- containerd 1.4 on v1 with systemd: ``/kubepods-besteffort-pod<uid>.slice:cri-containerd:<id>``
- Guaranteed pods have no QoS level (``kubepods-pod<uid>.slice``, ``/kubepods/pod<uid>``); static
  pods have a 32-hex UID (a hash) instead of a dashed one.

A process outside any pod (a host daemon, the MPS server) has no ``pod`` component: it is
reported as such, never guessed onto a pod.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_POD = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})(?:\.slice)?(?=$|[/:])"
)
_CONTAINER = re.compile(r"(?:^|[-:/])([0-9a-f]{64})(?:\.scope)?$")
_CONMON = "crio-conmon-"
"""CRI-O's monitor process for a container sits in a scope named after the container: not it."""


@dataclass(frozen=True)
class ContainerCgroup:
    """The pod UID (dashed, as the API server writes it) and, when the path names one, the container ID."""

    pod_uid: str
    container_id: str | None


def parse_cgroup(text: str) -> ContainerCgroup | None:
    """The pod and container of a ``/proc/<pid>/cgroup`` file; None for a process in no pod.

    Every hierarchy of a containerised process names the same pod and container, so the first
    line that names a pod decides (the v2 unified line ``0::`` when it is the only one).
    """
    for line in text.splitlines():
        _, _, path = line.strip().partition(":")
        _, _, path = path.partition(":")
        pod = _POD.search(path)
        if pod is None:
            continue
        uid = pod.group(1).replace("_", "-")
        last = path.rstrip("/").rsplit("/", 1)[-1]
        found = None if _CONMON in last else _CONTAINER.search(last)
        return ContainerCgroup(uid, found.group(1) if found else None)
    return None


def read_cgroup(pid: int, proc: Path = Path("/proc")) -> ContainerCgroup | None:
    """``parse_cgroup`` of a live process; None when it has exited or names no pod.

    Needs the host's PID namespace (``hostPID: true``), as NVML reports host PIDs.
    """
    try:
        return parse_cgroup((proc / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
