"""HAMi (Project-HAMi/HAMi): a vGPU device plugin and scheduler on the node's own driver and runtime.

Names as HAMi's chart renders them (charts/hami/templates/device-plugin/daemonsetnvidia.yaml and scheduler/
deployment.yaml at v2.4.1, v2.5.0, v2.6.0 and v2.8.0 alike): the DaemonSet ``<release>-device-plugin``
(``hami-device-plugin`` for the README's ``helm install hami hami-charts/hami -n kube-system``), labelled
``app.kubernetes.io/component: hami-device-plugin``, whose container ``device-plugin`` runs HAMi's fork of NVIDIA's
plugin (pkg/device-plugin/nvidiadevice, so its log lines are NVIDIA's) beside ``vgpu-monitor``, both from the image
``projecthami/hami:<version>``; the Deployment ``<release>-scheduler`` (component ``hami-scheduler``). The plugin
announces ``nvidia.com/gpu`` (values.yaml resourceName) split into vGPUs, with ``nvidia.com/gpumem``,
``nvidia.com/gpumem-percentage`` and ``nvidia.com/gpucores`` as the per-container slices HAMi-core (the library it
mounts into GPU containers) enforces. Its README's prerequisites: the NVIDIA driver on the host and "default runtime
configured as nvidia for containerd/docker/cri-o"; the chart's ``devicePlugin.runtimeClassName`` (empty by default)
is the other way to put the plugin under the nvidia runtime. No driver or toolkit DaemonSet: the host has both.

Volcano's vGPU device plugin (Project-HAMi/volcano-vgpu-device-plugin) is HAMi's plugin for Volcano's scheduler:
the DaemonSet ``volcano-device-plugin`` (deployments/static/volcano-vgpu-device-plugin.yml and the chart's
templates/daemonset.yaml), container ``volcano-device-plugin`` beside ``monitor``, image
``projecthami/volcano-vgpu-device-plugin:<version>``, no nodeSelector by default; it announces
``volcano.sh/vgpu-number`` (with ``volcano.sh/vgpu-memory`` and ``volcano.sh/vgpu-cores``, values.yaml deviceConfig)
instead of ``nvidia.com/gpu``. Its README's prerequisite is nvidia as the default runtime; the chart's
``runtimeClassName`` value (added after v1.12.0) puts the plugin under the nvidia runtime instead.
"""

from __future__ import annotations

import re

from gpuchain.doctor.stacks.base import images_of
from gpuchain.doctor.structs import Chart, Snapshot, Stack
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of
from gpuchain.operator.policy import ClusterPolicySpec

#: The image repository of HAMi's device plugin and scheduler (charts/hami/values.yaml devicePlugin.image).
IMAGE = "projecthami/hami"
#: The component label HAMi's chart puts on the plugin DaemonSet and its pods.
COMPONENT = "app.kubernetes.io/component"
PLUGIN_COMPONENT = "hami-device-plugin"
SCHEDULER_COMPONENT = "hami-scheduler"
CONTAINER = "device-plugin"
#: The chart as HAMi's README installs it (helm repo add hami-charts https://project-hami.github.io/HAMi/).
CHART = Chart(stack="hami", release="hami", chart="hami-charts/hami", namespace="kube-system")
#: The chart value that gives the plugin's pods a RuntimeClass (values.yaml devicePlugin.runtimeClassName).
RUNTIME_CLASS_VALUE = "devicePlugin.runtimeClassName"
#: The release tag of HAMi's image (``projecthami/hami:v2.6.0``).
_TAG = re.compile(re.escape(IMAGE) + r":(v?\d+(?:\.\d+)+)\b")


#: Volcano's vGPU device plugin, HAMi's plugin for Volcano: its image and plugin container, its chart as
#: its README installs it (helm repo add volcano-vgpu-device-plugin https://project-hami.github.io/volcano-vgpu-device-
#: plugin), and the chart value that gives its pods a RuntimeClass (values.yaml runtimeClassName).
VOLCANO_IMAGE = "projecthami/volcano-vgpu-device-plugin"
VOLCANO_CONTAINER = "volcano-device-plugin"
VOLCANO_CHART = Chart(
    stack="hami",
    release="volcano-vgpu-device-plugin",
    chart="volcano-vgpu-device-plugin/volcano-vgpu-device-plugin",
    namespace="kube-system",
)
VOLCANO_RUNTIME_CLASS_VALUE = "runtimeClassName"


def is_volcano_plugin(ds: Obj) -> bool:
    """Is this DaemonSet (or pod) Volcano's vGPU device plugin: its image."""
    return f"{VOLCANO_IMAGE}:" in images_of(ds)


def is_hami_plugin(ds: Obj) -> bool:
    """Is this DaemonSet HAMi's device plugin: its chart's component label, its name, or its image (HAMi's own, or
    the vGPU plugin HAMi makes for Volcano)?"""
    return (
        labels_of(ds).get(COMPONENT) == PLUGIN_COMPONENT
        or name_of(ds).endswith(PLUGIN_COMPONENT)
        or f"{IMAGE}:" in images_of(ds)
        or is_volcano_plugin(ds)
    )


def hami_version(ds: Obj | None) -> str:
    """The HAMi release a DaemonSet (or pod) runs, from its image tag ("v2.6.0"); "" where untagged or not HAMi's."""
    found = _TAG.search(images_of(ds)) if ds is not None else None
    if found is None:
        return ""
    tag = found.group(1)
    return tag if tag.startswith("v") else f"v{tag}"


#: The chart value that sets the tag of HAMi's images (the plugin's two containers and the scheduler extender):
#: ``version`` in charts/hami/values.yaml from v2.4.1 to v2.6.1, ``global.imageTag`` from v2.8.0.
TAG_VALUES = (((2, 8), "global.imageTag"), ((0, 0), "version"))


#: The chart version HAMi's release tags carry (charts/hami/Chart.yaml at the tag), where it is not the release's own
#: number: v2.6.1 kept the chart at 2.6.0 and moved only values.yaml's ``version`` to v2.6.1.
CHART_VERSIONS = {"v2.6.1": "2.6.0"}


def upgrade_flags(release: str) -> str:
    """The ``helm upgrade`` flags that move an installed HAMi chart to HAMi ``release`` ("v2.6.1"): the chart version
    that release's tag carries, the user's values kept, and the value that sets its images' tag."""
    numbers = tuple(int(n) for n in re.findall(r"\d+", release)[:2])
    key = next(k for since, k in TAG_VALUES if numbers >= since)
    chart = CHART_VERSIONS.get(release, release.removeprefix("v"))
    return f"--version {chart} --reuse-values --set {key}={release}"


def detect(snapshot: Snapshot) -> Stack | None:
    """HAMi's device plugin DaemonSet in any namespace (the scheduler's pods are noted, not required: a plugin
    without them still announces GPUs to the kubelet)."""
    found = [d for d in snapshot.daemonsets if is_hami_plugin(d)]
    if not found:
        return None
    # The NVIDIA plugin's DaemonSet before another of the chart's on the same image (its mock device plugin).
    plugin = min(found, key=lambda d: labels_of(d).get(COMPONENT) != PLUGIN_COMPONENT)
    namespace = namespace_of(plugin) or CHART.namespace
    scheduler = any(labels_of(p).get(COMPONENT) == SCHEDULER_COMPONENT for p in snapshot.pods)
    volcano = is_volcano_plugin(plugin)
    version = hami_version(plugin)
    spec = ClusterPolicySpec.model_validate(
        {k: {"enabled": False} for k in ("driver", "toolkit", "validator", "dcgmExporter", "gfd", "migManager")}
    )
    if volcano:
        notes = ["Volcano's vGPU device plugin (HAMi's, announcing volcano.sh/vgpu-number)"]
    else:
        notes = [f"HAMi {version}" if version else "HAMi (release not read from its image)"]
    if scheduler:
        notes.append("hami-scheduler runs beside the plugin")
    return Stack(
        id="hami",
        title="HAMi (vGPU device plugin and scheduler, host driver)",
        namespace=namespace,
        daemonsets={"device-plugin": name_of(plugin)},
        containers={"device-plugin": VOLCANO_CONTAINER if volcano else CONTAINER},
        policy=spec,
        host_driver=True,
        chart=VOLCANO_CHART if volcano else CHART,
        runtime_class_value=VOLCANO_RUNTIME_CLASS_VALUE if volcano else RUNTIME_CLASS_VALUE,
        notes=tuple(notes),
    )
