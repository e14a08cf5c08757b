"""A driver pod sidecar that installs packages without the repository configuration the driver container has.

The GPU Operator gives the driver container spec.driver.repoConfig (a ConfigMap of package repository files, mounted
into the OS's repository directory) and spec.driver.certConfig (a ConfigMap of certificates, into the OS's
certificate directory): an air-gapped or proxied cluster's mirror and its CA. The nvidia-fs (GPUDirect Storage) and
GDRCopy sidecars install kernel headers and build their modules like the driver container, from the same
repositories, but the operator mounts those ConfigMaps into them only from v24.3.0: transformGDSContainer and
transformGDRCopyContainer add a VolumeMount of each ConfigMap the driver container's transform made a Volume of
(NVIDIA/gpu-operator controllers/object_controls.go@v24.3.0, "Only add a VolumeMount for nvidia-fs-ctr"); up to
v23.9.2 only transformDriverContainer mounts them (controllers/object_controls.go@v23.9.2). Such a sidecar reaches for
its image's public repositories, finds no headers, and exits at every start, while the driver container beside it
installs: not the kernel's fault, nor the driver's, and a new pod fails the same way. The repair is the operator
release that mounts them into the sidecar.

Where the pod shows it (a ConfigMap or Secret volume the driver container mounts and the failing sidecar does not)
and the running operator is older than that release, the sidecar's failure is read as the missing mount before its
line is read as the kernel's.
"""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.driver_sidecars import sidecar_of
from gpuchain.doctor.links.releases import installed_release
from gpuchain.doctor.model import LinkState, Severity
from gpuchain.doctor.pods import PodState
from gpuchain.doctor.releases import release_of
from gpuchain.kube.objects import Obj

#: The driver container's name in the operator's driver DaemonSet (assets/state-driver/0500_daemonset.yaml).
DRIVER_CTR = "nvidia-driver-ctr"
#: The sidecar keys the operator mounts driver.repoConfig and driver.certConfig into, and the release from which it
#: does (controllers/object_controls.go@v24.3.0 transformGDSContainer, transformGDRCopyContainer).
CONFIGS_FROM = {"gds": "v24.3.0", "gdrcopy": "v24.3.0"}
#: The volume sources that carry configuration (a repository list, certificates), not host paths or scratch space.
CONFIG_SOURCES = ("configMap", "secret", "projected")


def _config_volumes(pod: Obj) -> dict[str, str]:
    """The pod's configuration volumes, as name -> what backs them ("ConfigMap repo-config")."""
    out: dict[str, str] = {}
    for vol in (pod.get("spec") or {}).get("volumes") or ():
        for source in CONFIG_SOURCES:
            if source in vol:
                backing = vol[source] or {}
                named = backing.get("name") or backing.get("secretName") or ""
                out[str(vol.get("name"))] = f"{source} {named}".strip()
    return out


def _mounts(pod: Obj, container: str) -> dict[str, str]:
    """``container``'s volume mounts, as volume name -> mount path."""
    for c in (pod.get("spec") or {}).get("containers") or ():
        if c.get("name") == container:
            return {str(m.get("name")): str(m.get("mountPath")) for m in c.get("volumeMounts") or ()}
    return {}


def sidecar_without_configs(ctx: Context, view: NodeView, pod: Obj, state: PodState) -> Result | None:
    """The driver pod's sidecar ``state.container`` failing without the configuration volumes the driver container
    mounts, on a GPU Operator older than the release that mounts them into it (None otherwise)."""
    car = sidecar_of(state.container or "")
    since = CONFIGS_FROM.get(car.key, "") if car is not None else ""
    if car is None or not since or not state.failing or not state.restarts:
        return None
    driver, sidecar = _mounts(pod, DRIVER_CTR), _mounts(pod, state.container)
    missing = {name: path for name, path in driver.items() if name in _config_volumes(pod) and name not in sidecar}
    # The release the install shows (Helm labels, the operator's image), not the validator's version: that is a key of
    # the same ClusterPolicy, as stale as the rest where the policy outlived an older install.
    version, helm = installed_release(ctx)
    running, least = release_of(version, "gpu-operator"), release_of(since, "gpu-operator")
    if not missing or (running is not None and least is not None and not running < least):
        return None
    backing = _config_volumes(pod)
    said = "; ".join(f"volume {n} ({backing[n]}) at {p}" for n, p in sorted(missing.items()))
    on = f"GPU Operator {version}" if version else "the GPU Operator"
    chart = ctx.stack.chart.chart if ctx.stack.chart is not None else "nvidia/gpu-operator"
    upgrade = (
        f"helm upgrade {helm} {chart} -n {ctx.namespace} --version {since} --reuse-values"
        if helm
        else f"# upgrade the GPU Operator to {since} or later"
    )
    return Result(
        LinkState.BROKEN,
        f"{car.title} sidecar without the driver's repository configuration",
        (
            node_finding(
                view,
                fid="driver.sidecar-without-configs",
                sev=Severity.ERROR,
                link="driver",
                cause=f"the driver pod is {state.status}: its driver container runs, and its {car.title} sidecar "
                f"{state.container} exits at every start ({state.restarts} restarts). The driver container mounts "
                f"the repository configuration it installs from ({said}) and the sidecar does not: {on} mounts "
                f"spec.driver.repoConfig and spec.driver.certConfig into the {car.title} container only from {since}, "
                "so the sidecar reaches for its image's default package repositories (unreachable from an "
                "air-gapped or proxied cluster), finds no kernel headers, and stops; a new pod fails the same way.",
                evidence=[
                    state.describe(),
                    f"container {DRIVER_CTR} mounts {', '.join(sorted(missing))}; {state.container} does not",
                    "source: NVIDIA/gpu-operator controllers/object_controls.go@v24.3.0 (transformGDSContainer, "
                    "transformGDRCopyContainer)",
                ],
                fix=f"{upgrade}   # GPU Operator {since} or later mounts the driver's repoConfig and certConfig "
                f"into the {car.title} container too; until then, give {state.container} the same volumeMounts as "
                f"{DRIVER_CTR} ({said}) in the driver DaemonSet (the operator may put its own template back), or set "
                f"spec.{car.policy_key}.enabled=false",
            ),
        ),
    )
