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

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.driver_sidecars import sidecar_of
from gpuchain.doctor.links.releases import installed_release
from gpuchain.doctor.model import LinkState, Severity
from gpuchain.doctor.owners import owner_daemonset
from gpuchain.doctor.pods import PodState
from gpuchain.doctor.releases import release_of
from gpuchain.kube.objects import Obj

#: The driver container's name in the operator's driver DaemonSet (assets/state-driver/0500_daemonset.yaml).
DRIVER_CTR = "nvidia-driver-ctr"
#: The sidecar keys the operator mounts driver.repoConfig and driver.certConfig into, and the release from which it
#: does (controllers/object_controls.go@v24.3.0 transformGDSContainer, transformGDRCopyContainer).
CONFIGS_FROM = {"gds": "v24.3.0", "gdrcopy": "v24.3.0"}
#: The catalog's lines for kernel headers the package repositories do not have (links/driver.py NO_HEADERS).
NO_HEADERS = ("apt.kernel-headers-missing", "nvidia-installer.kernel-source-missing")
#: The volume sources that carry configuration (a repository list, certificates), not host paths or scratch space.
CONFIG_SOURCES = ("configMap", "secret", "projected")


def _config_volumes(spec: Obj) -> dict[str, str]:
    """A pod spec's configuration volumes, as name -> what backs them ("configMap repo-config")."""
    out: dict[str, str] = {}
    for vol in spec.get("volumes") or ():
        for source in CONFIG_SOURCES:
            if source in vol:
                backing = vol[source] or {}
                named = backing.get("name") or backing.get("secretName") or ""
                out[str(vol.get("name"))] = f"{source} {named}".strip()
    return out


def _mounts(spec: Obj, container: str) -> dict[str, str] | None:
    """``container``'s volume mounts in a pod spec, as volume name -> mount path (None: no such container)."""
    for c in spec.get("containers") or ():
        if c.get("name") == container:
            return {str(m.get("name")): str(m.get("mountPath")) for m in c.get("volumeMounts") or ()}
    return None


def _unmounted(ctx: Context, pod: Obj, container: str) -> list[str]:
    """What shows the sidecar without the driver container's configuration: its DaemonSet's template mounting a
    configuration volume into the driver container and not into it (the live read keeps a pod's mounts only in its
    template), and the ClusterPolicy's repoConfig / certConfig, which the operator mounts into the driver container."""
    template = ((owner_daemonset(ctx, pod).get("spec") or {}).get("template") or {}).get("spec") or {}
    driver, sidecar, backing = (
        _mounts(template, DRIVER_CTR) or {},
        _mounts(template, container),
        _config_volumes(template),
    )
    shown = [
        f"volume {n} ({backing[n]}) at {p}"
        for n, p in sorted(driver.items())
        if n in backing and sidecar is not None and n not in sidecar
    ]
    driver_spec = ((ctx.policy_obj or {}).get("spec") or {}).get("driver") or {}
    repo = (driver_spec.get("repoConfig") or {}).get("configMapName")
    certs = (driver_spec.get("certConfig") or {}).get("name")
    shown += [f"spec.driver.repoConfig.configMapName {repo}"] if repo else []
    shown += [f"spec.driver.certConfig.name {certs}"] if certs else []
    return shown


def _driver_runs(pod: Obj) -> bool:
    """Is the driver container of ``pod`` running (it found what it installs from)?"""
    return any(
        cs.get("name") == DRIVER_CTR and "running" in (cs.get("state") or {})
        for cs in (pod.get("status") or {}).get("containerStatuses") or ()
    )


def sidecar_without_configs(ctx: Context, view: NodeView, pod: Obj, state: PodState) -> Result | None:
    """The driver pod's sidecar ``state.container`` failing for want of what the driver container installs from (its
    configuration volumes, or the kernel headers the driver container found), on a GPU Operator older than the release
    that mounts the driver's repoConfig and certConfig into it (None otherwise)."""
    car = sidecar_of(state.container or "")
    since = CONFIGS_FROM.get(car.key, "") if car is not None else ""
    if car is None or not since or not state.failing or not state.restarts or not _driver_runs(pod):
        return None
    # The release the install shows (Helm labels, the operator's image), not the validator's version: that is a key of
    # the same ClusterPolicy, as stale as the rest where the policy outlived an older install.
    version, helm = installed_release(ctx)
    running, least = release_of(version, "gpu-operator"), release_of(since, "gpu-operator")
    if running is not None and least is not None and not running < least:
        return None
    shown = _unmounted(ctx, pod, state.container)
    headers = catalog.find(ctx.log(pod, state.container), *NO_HEADERS)
    if not shown and headers is None:
        return None
    said = "; ".join(shown) or "its repository configuration, with which the driver container beside it found them"
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
                f"{state.container} exits at every start ({state.restarts} restarts), without what the driver "
                f"container installs from ({said}): {on} mounts spec.driver.repoConfig and spec.driver.certConfig "
                f"into the {car.title} container only from {since}, so the sidecar reads its image's default package "
                "repositories (unreachable from an air-gapped or proxied cluster) and finds no kernel headers there, "
                "while the driver container beside it did; a new pod fails the same way.",
                evidence=[
                    state.describe(),
                    *(headers.evidence(f"{state.container} log") if headers else ()),
                    *(f"not given to {state.container}: {x}" for x in shown),
                    "source: NVIDIA/gpu-operator controllers/object_controls.go@v24.3.0 (transformGDSContainer, "
                    "transformGDRCopyContainer)",
                ],
                fix=f"{upgrade}   # GPU Operator {since} or later mounts the driver's repoConfig and certConfig "
                f"into the {car.title} container too; until then, give {state.container} the driver container's "
                "repository configuration mounts in the driver DaemonSet (the operator may put its own template "
                f"back), or set spec.{car.policy_key}.enabled=false",
            ),
        ),
    )
