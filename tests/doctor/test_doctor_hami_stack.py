"""HAMi as a stack: its vGPU device plugin DaemonSet is the device-plugin link on the host's driver and runtime, so the
walk below it (the runtime the plugin gets) reads as on NVIDIA's plugin, with HAMi's chart values in the fixes; and
HAMi-core, the library it mounts into GPU containers, refusing memory for a usage no GPU has is HAMi's release to move.

Sources. Names: Project-HAMi/HAMi charts/hami/templates/device-plugin/daemonsetnvidia.yaml@v2.5.0 and @v2.6.0
(DaemonSet ``<fullname>-device-plugin``, label app.kubernetes.io/component: hami-device-plugin, containers device-plugin
and vgpu-monitor, image projecthami/hami:<version>), values.yaml@v2.6.0 (devicePlugin.runtimeClassName, version). The
plugin's platform-detection lines: Project-HAMi/HAMi pkg/device-plugin/nvidiadevice/nvinternal/plugin/manager/
factory.go@v2.5.0 (NVIDIA's wording, from the plugin HAMi forked). HAMi-core's refusal: Project-HAMi/HAMi-core
src/allocator/allocator.c@c0f9da6 ("Device %d OOM %lu / %lu"); the releases that ship the miscount and its fix:
HAMi's libvgpu submodule at v2.5.1/v2.5.2/v2.6.0 and v2.5.3/v2.6.1 (HAMi#1256). Node names, versions, limits and
counts are stand-ins.
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import crash_looping, crashing_pod, diagnosed, no_gpus

from gpuchain.doctor import Severity
from gpuchain.doctor.links.hami_core import impossible
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.doctor.stacks.hami import upgrade_flags
from gpuchain.kube import DAEMONSET, POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster

NO_NVML = (
    "I0301 10:00:00.000000    4242 factory.go:107] Detected non-NVML platform: could not load NVML library: "
    "libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n"
    "E0301 10:00:00.000000    4242 factory.go:115] Incompatible platform detected\n"
    "E0301 10:00:00.000000    4242 factory.go:116] If this is a GPU node, did you configure the NVIDIA Container "
    "Toolkit?\n"
    "E0301 10:00:00.000000    4242 main.go:174] error starting plugins: error creating plugin manager: unable to create "
    "plugin manager: platform detection failed\n"
)
CRASHING = crash_looping("device-plugin", 6)


def hami(version: str, *, name: str = "hami-device-plugin") -> Any:
    """An edit: the standalone plugin's DaemonSet and pods made HAMi's chart's: its name, its component label, the
    device-plugin and vgpu-monitor containers on projecthami/hami:<version>."""

    def edit(sim: SimCluster) -> None:
        image = f"projecthami/hami:{version}"
        containers = [{"name": "device-plugin", "image": image}, {"name": "vgpu-monitor", "image": image}]
        for ds in sim.cluster.list(DAEMONSET):
            if "nvidia-device-plugin" not in name_of(ds):
                continue
            ns, old = namespace_of(ds), name_of(ds)
            labels = {"app.kubernetes.io/component": "hami-device-plugin", "app.kubernetes.io/instance": "vgpu"}
            new = {**ds, "metadata": {"name": name, "namespace": ns, "labels": labels}}
            new["spec"] = {**ds["spec"], "template": {**ds["spec"]["template"]}}
            new["spec"]["template"]["spec"] = {**ds["spec"]["template"]["spec"], "containers": containers}
            sim.cluster.delete(DAEMONSET, name=old, namespace=ns)
            sim.cluster.create(new)
            for pod in sim.cluster.list(POD):
                refs = pod["metadata"].get("ownerReferences") or []
                if not any(r.get("name") == old for r in refs):
                    continue
                sim.cluster.delete(POD, name=name_of(pod), namespace=ns)
                suffix = name_of(pod).rpartition("-")[2]
                meta = {
                    **pod["metadata"],
                    "name": f"{name}-{suffix}",
                    "labels": {**(pod["metadata"].get("labels") or {}), **labels},
                    "ownerReferences": [{**refs[0], "name": name}],
                }
                sim.cluster.create({**pod, "metadata": meta, "spec": {**pod["spec"], "containers": containers}})

    return edit


def _cluster(node: str, *, distribution: str = "", runtime: str = "", workloads: str = "") -> str:
    extra = f", distribution: {distribution}" if distribution else ""
    extra += f", containerRuntime: '{runtime}'" if runtime else ""
    return (
        f"name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: {node}, preset: l4-x2, hostDriver: 550.144.03{extra}}}\n"
        + (f"workloads:\n{workloads}" if workloads else "")
    )


def _plugin(node: str) -> dict[str, Any]:
    """An edit: HAMi's plugin pod on ``node`` crash-looping on the platform detection that found no NVML."""
    return crashing_pod("hami-device-plugin", "device-plugin", node, NO_NVML, restarts=6)


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


# -- the stack -------------------------------------------------------------------------------------------------------


def test_a_hami_cluster_is_the_hami_stack_with_its_release_and_stays_quiet_when_healthy() -> None:
    report = diagnosed(_cluster("gpu-a"), hami("v2.5.0"))
    assert report.stack["id"] == "hami" and report.stack["daemonsets"] == {"device-plugin": "hami-device-plugin"}
    assert "HAMi v2.5.0" in report.stack["notes"]
    assert [f for f in report.findings if f.severity is not Severity.INFO] == []


def test_a_renamed_release_is_found_by_its_component_label_and_image() -> None:
    report = diagnosed(_cluster("gpu-a"), hami("v2.6.1", name="gpu-share-device-plugin"))
    assert report.stack["id"] == "hami" and report.stack["daemonsets"]["device-plugin"] == "gpu-share-device-plugin"


def test_nvidia_plugin_clusters_keep_their_stack() -> None:
    report = diagnosed(_cluster("gpu-a"))
    assert report.stack["id"] == "nvidia-device-plugin"


# -- the runtime under HAMi's plugin ---------------------------------------------------------------------------------


def test_hami_plugin_without_nvml_on_containerd_is_the_default_runtime_not_a_missing_stack() -> None:
    report = diagnosed(
        _cluster("gpu-c", runtime="containerd://1.7.24"), hami("v2.6.0"), no_gpus("gpu-c"), _plugin("gpu-c")
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("toolkit.runtime-not-default", "toolkit", "gpu-c")
    assert "--set-as-default" in root.fix and "stack.missing" not in {f.id for f in report.findings}


def test_hami_plugin_without_nvml_on_docker_sets_dockers_default_runtime() -> None:
    report = diagnosed(
        _cluster("worker-7", runtime="docker://24.0.9"), hami("v2.5.1"), no_gpus("worker-7"), _plugin("worker-7")
    )
    (root,) = _roots(report)
    assert root.id == "toolkit.runtime-not-default" and "daemon.json" in root.fix


def test_hami_plugin_on_rke2_gets_the_runtime_class_through_hamis_chart_value() -> None:
    report = diagnosed(_cluster("rk-1", distribution="rke2"), hami("v2.5.0"), no_gpus("rk-1"), _plugin("rk-1"))
    (root,) = _roots(report)
    assert root.id == "toolkit.runtime-not-default"
    assert "patch ds hami-device-plugin" in root.fix and "devicePlugin.runtimeClassName=nvidia" in root.fix
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET


def test_nvidias_plugin_on_k3s_still_names_its_own_chart_value() -> None:
    plugin = {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "node": "k-1",
        "containers": [{**CRASHING, "name": "nvidia-device-plugin-ctr"}],
        "logs": {"nvidia-device-plugin-ctr": NO_NVML},
    }
    report = diagnosed(_cluster("k-1", distribution="k3s"), no_gpus("k-1"), plugin)
    (root,) = _roots(report)
    assert "chart's value runtimeClassName=nvidia" in root.fix and "devicePlugin." not in root.fix


# -- HAMi-core's miscount --------------------------------------------------------------------------------------------


def _refused(node: str, used: int, limit: int) -> dict[str, Any]:
    """An edit: the workload's pod on ``node`` exits after HAMi-core refused an allocation (its log as HAMi-core's
    LOG_ERROR prints it: "[HAMI-core ERROR (pid:%d thread=%ld %s:%d)]: Device %d OOM %lu / %lu")."""
    line = f"[HAMI-core ERROR (pid:7 thread=140001 allocator.c:53)]: Device 0 OOM {used} / {limit}\n"
    return {
        "do": "pod",
        "daemonset": "infer",
        "namespace": "ml",
        "node": node,
        "containers": [{**CRASHING, "name": "infer"}],
        "logs": {"infer": line + "RuntimeError: CUDA error: out of memory\n"},
    }


WORKLOAD = "  - {name: infer, namespace: ml, count: 2, gpus: 1, node: %s}\n"
#: 16 EiB less a little: an unsigned 64-bit count driven below zero.
WRAPPED = 18446744073705357312


def test_hami_252_refusing_memory_for_a_wrapped_count_moves_to_253() -> None:
    report = diagnosed(
        _cluster("a100-3", workloads=WORKLOAD % "a100-3"), hami("v2.5.2"), _refused("a100-3", WRAPPED, 10737418240)
    )
    (root,) = _roots(report)
    assert (root.id, root.link, root.node) == ("device-plugin.hami-core-miscount", "device-plugin", "a100-3")
    assert "helm upgrade --install vgpu hami-charts/hami" in root.fix
    assert "--version 2.5.3 --reuse-values --set version=v2.5.3" in root.fix and "kubectl delete pod -n ml" in root.fix
    assert any("hami.core-async-miscount-2.5" in e for e in root.evidence)


def test_hami_260_moves_to_261_on_the_chart_that_release_kept() -> None:
    assert upgrade_flags("v2.6.1") == "--version 2.6.0 --reuse-values --set version=v2.6.1"
    report = diagnosed(
        _cluster("l4-9", workloads=WORKLOAD % "l4-9"), hami("v2.6.0"), _refused("l4-9", 1 << 44, 4194304000)
    )
    (root,) = _roots(report)
    assert "--set version=v2.6.1" in root.fix and "v2.6.1" in root.cause


def test_a_refusal_within_the_limit_and_one_allocation_is_the_workloads_size_and_stays_quiet() -> None:
    report = diagnosed(
        _cluster("l4-9", workloads=WORKLOAD % "l4-9"), hami("v2.6.0"), _refused("l4-9", 4404019200, 4194304000)
    )
    assert "device-plugin.hami-core-miscount" not in {f.id for f in report.findings}


def test_a_miscount_on_a_release_not_known_to_miscount_upgrades_hami_without_naming_a_fixed_release() -> None:
    report = diagnosed(
        _cluster("l4-9", workloads=WORKLOAD % "l4-9"), hami("v2.7.0"), _refused("l4-9", WRAPPED, 4194304000)
    )
    (root,) = _roots(report)
    assert root.id == "device-plugin.hami-core-miscount" and "--set version" not in root.fix
    assert "newest release" in root.fix and not any(e.startswith("release:") for e in root.evidence)


def test_the_bound_is_the_gpus_own_memory_where_feature_discovery_labels_it() -> None:
    # An L4 has 23034 MiB (GFD's nvidia.com/gpu.memory): a count 30 GiB over the limit is impossible on it, not on
    # the largest GPU.
    over = 4194304000 + 30 * (1 << 30)
    line = f"Device 0 OOM {over} / 4194304000"
    assert impossible(line, memory=23034 << 20) and not impossible(line, memory=284672 << 20)
