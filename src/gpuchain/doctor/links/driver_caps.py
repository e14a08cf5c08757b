"""A GPU pod whose container lacks a driver capability it uses: the NVIDIA runtime mounts only the driver libraries of
the capabilities the container asks for.

The NVIDIA Container Toolkit reads ``NVIDIA_DRIVER_CAPABILITIES`` from the container and injects the libraries of each
capability it names; unset, it is ``utility,compute`` (NVIDIA/nvidia-container-toolkit internal/config/image/
capabilities.go, DefaultDriverCapabilities; all of them only for a legacy CUDA image that sets no variable), and ``all``
names every one. The video capability carries the codec libraries, libnvcuvid and libnvidia-encode (libnvidia-container
src/nvc_info.c, its video libraries). A container given a GPU without ``video`` runs, and its decoder or encoder fails
when it dlopens them: FFmpeg's loader says "Cannot load libnvcuvid.so.1" (FFmpeg compat/cuda/dynlink_loader.h@n3.4,
LOAD_LIBRARY; nv-codec-headers carries the same macro since). The repair is the variable on the pod template of the
pod's owner, then the pods made again.
"""

from __future__ import annotations

import copy

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding, said_by
from gpuchain.doctor.model import Finding, Severity
from gpuchain.doctor.ready_gpu_logs import CAPABILITY_LIBRARY
from gpuchain.doctor.scheduling import owner_of, patch_fix
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: The container's variable the NVIDIA runtime reads for the driver capabilities to inject.
CAPS_ENV = "NVIDIA_DRIVER_CAPABILITIES"
#: What the runtime injects where the variable is unset (DefaultDriverCapabilities).
DEFAULT_CAPS = ("utility", "compute")
#: The driver library a loader could not open, per the capability whose libraries carry it (nvc_info.c).
CAPABILITY_OF = {"libnvcuvid": "video", "libnvidia-encode": "video"}
#: The catalog's words of a loader that could not open a driver library (the ready-pod probe keeps them).
CANNOT_LOAD = CAPABILITY_LIBRARY


def _caps(container: Obj) -> tuple[str, ...]:
    """The capabilities the runtime injects for ``container``: its variable's, or the default where unset."""
    for e in container.get("env") or []:
        if e.get("name") == CAPS_ENV and e.get("value") is not None:
            return tuple(c.strip() for c in str(e["value"]).split(",") if c.strip())
    return DEFAULT_CAPS


def missing_capability(ctx: Context, view: NodeView, apps: list[Obj]) -> Finding | None:
    """GPU pods on this node whose log says a driver library of a capability their container does not ask for could
    not be loaded: the toolkit link, repaired by the capability in ``NVIDIA_DRIVER_CAPABILITIES`` on the owner."""
    for pod in apps:
        if not pod_gpu_requests(pod):
            continue
        said = catalog.find(said_by(ctx, pod), *CANNOT_LOAD)
        if said is None:
            continue
        lib = next((k for k in CAPABILITY_OF if k in said.line), None)
        if lib is None:
            continue
        cap = CAPABILITY_OF[lib]
        spec = pod.get("spec") or {}
        containers = copy.deepcopy(spec.get("containers") or [])
        gpu = [c for c in containers if ((c.get("resources") or {}).get("limits") or {}).keys() & {"nvidia.com/gpu"}]
        lacking = [c for c in gpu or containers if not {"all", cap} & set(_caps(c))]
        if not lacking:
            continue
        asked = _caps(lacking[0])
        value = ",".join(dict.fromkeys((*asked, cap)))
        for c in lacking:
            env = [e for e in c.get("env") or [] if e.get("name") != CAPS_ENV]
            c["env"] = [*env, {"name": CAPS_ENV, "value": ",".join(dict.fromkeys((*_caps(c), cap)))}]
        owner = owner_of(pod)
        action = patch_fix(owner, {"containers": containers})
        return node_finding(
            view,
            fid="workload.driver-capability-missing",
            sev=Severity.ERROR,
            link="toolkit",
            cause=f"GPU pod {namespace_of(pod)}/{name_of(pod)} cannot load the driver's {lib} library: the NVIDIA "
            f"runtime injects only the driver capabilities its container asks for in {CAPS_ENV} "
            f"({','.join(asked)}{', the default where it is unset' if asked == DEFAULT_CAPS else ''}), "
            f"and {lib} is the {cap} capability's.",
            evidence=[*said.evidence("pod says"), f"container {lacking[0].get('name')}: {CAPS_ENV}={value} wanted"],
            fix=f"{ctx.stack.render(action)}   # set {CAPS_ENV}={value} (or all) on {owner.kind} "
            f"{owner.namespace}/{owner.name}'s GPU container, then restart its pods",
            action=action,
        )
    return None
