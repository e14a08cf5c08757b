"""Release facts read from the components' changelogs (releases.yaml, issue 26): a plugin whose log shows a defect
its running release has gets the release that fixed it as the fix, set where its image comes from; the same line
from a release the fact does not cover cites no release."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
from doctor.small_cluster import crash_looping, diagnosed, no_gpus, plugin_image, plugin_pod
from doctor.test_doctor_fixes import _failing, _start_error, crio_without_nvidia, without_sys_admin
from doctor.test_doctor_release_fixes import OPERATOR, _image, _refused, _standalone

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.kube import POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim import build, load_scenario
from gpuchain.sim.build import SimCluster

NODE = "gpu-worker-3"
PLUGIN = f"name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: {NODE}, hostDriver: 550.54.15}}\n"
REPO = "nvcr.io/nvidia/k8s-device-plugin"
SET = "kubectl -n kube-system set image ds/nvidia-device-plugin-daemonset nvidia-device-plugin-ctr="
#: The plugin's last words where NVML reports no memory for a GPU (internal/rm/devices.go@v0.17.3 "error getting
#: device memory: %w" under rm.go's "failed to construct NVML resource managers: %v").
MEMORY = (
    "E0806 09:14:02.118431       1 main.go:173] failed to construct NVML resource managers: error getting device "
    "memory: Not Supported"
)


def _root(tag: str, log: str) -> Finding:
    """The root error of a plugin at ``tag`` that crash-loops with ``log``."""
    report: Report = diagnosed(
        PLUGIN,
        no_gpus(NODE),
        plugin_pod(NODE, crash_looping("nvidia-device-plugin-ctr", restarts=6), f"starting\n{log}"),
        plugin_image(f"{REPO}:{tag}"),
    )
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    return root


@pytest.mark.parametrize("tag", ["v0.15.0", "v0.17.0", "v0.17.3-ubi9"])
def test_an_affected_release_is_moved_to_the_release_that_fixed_it(tag: str) -> None:
    root = _root(tag, MEMORY)
    assert (root.link, root.node) == ("device-plugin", NODE)
    suffix = tag.partition("-")[2]
    assert root.fix.startswith(f"{SET}{REPO}:v0.18.0{'-' + suffix if suffix else ''} "), root.fix
    fact = "release: k8s-device-plugin.device-memory (NVIDIA/k8s-device-plugin CHANGELOG.md@v0.18.0)"
    assert fact in root.evidence


@pytest.mark.parametrize("tag", ["v0.18.0", "v0.14.5"])
def test_a_release_the_fact_does_not_cover_cites_no_release(tag: str) -> None:
    """The same line from a release outside the affected range: the catalog's repair, no release fact, and no
    move to the release that fixed what this one never had."""
    root = _root(tag, MEMORY)
    assert root.link == "device-plugin"
    assert not any(e.startswith("release: ") for e in root.evidence), root.evidence
    assert f"{REPO}:v0.18.0" not in root.fix, root.fix


#: The CDI create-symlinks hook of toolkit v1.17.0 refusing a link the image already has (cmd/nvidia-cdi-hook/
#: create-symlinks/create-symlinks.go@v1.17.0 "failed to create link %v: %w" around "failed to check if link exists:
#: %w" and "unexpected link target: %s"), as runc reports the hook's exit.
LINK_TARGET = (
    "Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
    "failed: unable to start container process: error during container init: error running createContainer hook "
    '#1: exit status 1, stdout: , stderr: time="2024-11-05T10:00:00Z" level=error msg="failed to create link '
    "[libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so]: failed to check if link exists: unexpected link target: "
    '/usr/local/cuda/compat/libcuda.so.1"'
)
#: NVIDIA/nvidia-container-toolkit#797, nvidia-container-cli refusing the IMEX "all" of a legacy image.
IMEX_ALL = (
    "Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
    "failed: unable to start container process: error during container init: error running hook #0: error running "
    "hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\nnvidia-container-cli: error parsing "
    "IMEX info: unsupported IMEX channel value: all: unknown"
)
JOB = "workloads:\n  - {name: job, gpus: 1, node: gpu-worker-3}\n"


def _hook(scenario: str, *edits: object) -> Finding:
    (hook,) = [f for f in diagnosed(scenario + JOB, *edits).findings if f.id == "workload.runtime-hook-failed"]
    return hook


def test_the_operators_toolkit_on_the_release_whose_hook_refuses_image_links_is_moved_to_the_fixed_one() -> None:
    """The operator's toolkit runs v1.17.0-ubuntu20.04: the hook's message is that release's defect, so the fix is
    the policy's toolkit version at v1.17.1 (its OS suffix kept); a toolkit at v1.17.1 gets no release."""
    hook = _hook(OPERATOR, _refused(LINK_TARGET))
    assert hook.link == "toolkit"
    assert '"toolkit":{"version":"v1.17.1-ubuntu20.04"}' in hook.fix.replace(" ", ""), hook.fix
    assert any(e.startswith("release: container-toolkit.create-symlinks-link-target (") for e in hook.evidence)
    fixed = _hook(
        OPERATOR,
        _image("nvidia-container-toolkit", "nvcr.io/nvidia/k8s/container-toolkit:v1.17.1-ubuntu20.04"),
        _refused(LINK_TARGET),
    )
    assert not any(e.startswith("release: ") for e in fixed.evidence) and "kubectl patch" not in fixed.fix


def test_a_host_toolkit_refusing_a_legacy_images_imex_all_names_the_release_that_requests_none() -> None:
    """On a node image the toolkit's version is no object's: the fix is conditional on the release it runs."""
    hook = _hook("name: t\nstack: eks\nnodes:\n  - {name: gpu-worker-3}\n", _refused(IMEX_ALL))
    assert "upgrade the NVIDIA Container Toolkit to >= v1.17.2 (or back to v1.16.2)" in hook.fix
    assert any(e.startswith("release: container-toolkit.legacy-image-imex-all (") for e in hook.evidence)


#: GFD v0.8.1 refused the NodeFeature object it publishes (internal/lm/labels.go@v0.8.1), as klog writes the error.
NODEFEATURE = (
    'E0815 08:00:00.000000       1 main.go:123] error: failed to create NodeFeature object "nvidia-features-for-'
    'gpu-worker-3": nodefeatures.nfd.k8s-sigs.io is forbidden: User "system:serviceaccount:node-feature-discovery:'
    'gpu-feature-discovery" cannot create resource "nodefeatures" in API group "nfd.k8s-sigs.io" in the namespace '
    '"node-feature-discovery"\n'
)


@pytest.mark.parametrize(("chart", "upgraded"), [("0.8.1", True), ("0.8.2", False)])
def test_gfd_of_the_chart_without_create_on_nodefeatures_is_upgraded_to_the_chart_that_grants_it(
    chart: str, upgraded: bool
) -> None:
    labels = {"helm.sh/chart": f"gpu-feature-discovery-{chart}", "app.kubernetes.io/instance": "gfd"}
    image = f"nvcr.io/nvidia/gpu-feature-discovery:v{chart}"
    found = diagnosed(PLUGIN, *_standalone("gfd-gpu-feature-discovery", image, NODEFEATURE, **labels))
    (root,) = [f for f in found.findings if f.root and f.severity is Severity.ERROR]
    assert root.link == "gfd"
    assert root.fix.startswith("helm upgrade gfd ") == upgraded and ("--version 0.8.2" in root.fix) == upgraded
    assert any(e.startswith("catalog: gpu-feature-discovery.nodefeature-create (") for e in root.evidence)


def test_an_operand_the_hook_refuses_with_a_release_defect_moves_the_toolkit_to_the_release_that_fixed_it() -> None:
    """The device plugin's container refused by the hook of the operator's toolkit v1.17.0 with the IMEX "all" of
    #797: the toolkit is the root and its fix is the policy's toolkit version v1.17.2, the catalog's repair after."""
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: b}\n",
        _failing("nvidia-device-plugin-daemonset", "b", main="nvidia-device-plugin", lastState=_start_error(IMEX_ALL)),
    )
    found = next(f for f in report.findings if f.root)
    assert (found.id, found.link, found.node) == ("toolkit.hook-failed", "toolkit", "b")
    assert found.action is not None and found.action.changes == {
        "spec": {"toolkit": {"version": "v1.17.2-ubuntu20.04"}}
    }
    assert "otherwise: " in found.fix and "NVIDIA_IMEX_CHANNELS" in found.fix
    assert any(e.startswith("release: container-toolkit.legacy-image-imex-all (") for e in found.evidence)


#: GPU feature discovery's labels of an L40S (compute capability 8.9) as releases before v0.17.1 write them, and of
#: a B200 (10.0) as releases before v0.18.0 do (internal/lm/resource.go@v0.17.0 getArchFamily).
ADA = {"nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "9", "nvidia.com/gpu.family": "ampere"}
BLACKWELL = {
    "nvidia.com/gpu.compute.major": "10",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.family": "undefined",
}


def _labelled(labels: dict[str, str], *edits: object) -> list[Finding]:
    """The gfd.known-defect findings of the operator's node labelled ``labels`` by GFD."""
    report = diagnosed(OPERATOR, {"do": "node", "node": NODE, "labels": labels}, *edits)
    return [f for f in report.findings if f.id == "gfd.known-defect"]


@pytest.mark.parametrize(
    ("labels", "fixed", "fact"), [(ADA, "v0.17.1", "gfd-ada-family"), (BLACKWELL, "v0.18.0", "gfd-blackwell-family")]
)
def test_gpu_family_labels_of_a_gfd_release_that_did_not_know_the_gpu_move_gfd_to_the_release_that_does(
    labels: dict[str, str], fixed: str, fact: str
) -> None:
    """The operator's GFD runs the device plugin image v0.17.0: the family it wrote is that release's, a warning
    (the chain works), and the fix is the policy's GFD version at the release that labels the family right."""
    (found,) = _labelled(labels)
    assert (found.severity, found.link, found.node) == (Severity.WARNING, "gfd", NODE)
    assert found.action is not None and found.action.changes == {"spec": {"gfd": {"version": fixed}}}
    assert any(e.startswith(f"release: k8s-device-plugin.{fact} (") for e in found.evidence)
    assert f"nvidia.com/gpu.family={labels['nvidia.com/gpu.family']}" in found.evidence[0]


def test_right_family_labels_or_a_gfd_release_that_knows_the_gpu_are_no_known_defect() -> None:
    assert not _labelled({**ADA, "nvidia.com/gpu.family": "ada-lovelace"})
    assert not _labelled(ADA, _image("gpu-feature-discovery", "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"))
    assert not _labelled({**ADA, "nvidia.com/gpu.compute.minor": "6"})


def test_a_memory_label_in_bytes_from_the_gfd_release_that_wrote_bytes_moves_gfd_to_the_release_that_writes_mib() -> (
    None
):
    """GFD v0.6.1 labels an A100-40GB's 42505273344 bytes; the policy's GFD image moves to v0.6.2, its OS suffix
    kept. A MiB value, or GFD at v0.6.2, is no defect."""
    image = "nvcr.io/nvidia/gpu-feature-discovery:v0.6.1-ubi8"
    bytes_ = {"nvidia.com/gpu.memory": "42505273344"}
    (found,) = _labelled(bytes_, _image("gpu-feature-discovery", image))
    assert found.action is not None and found.action.changes == {"spec": {"gfd": {"version": "v0.6.2-ubi8"}}}
    assert not _labelled({"nvidia.com/gpu.memory": "40960"}, _image("gpu-feature-discovery", image))
    assert not _labelled(bytes_, _image("gpu-feature-discovery", image.replace("v0.6.1", "v0.6.2")))


@pytest.mark.parametrize(("tag", "moved"), [("v1.18.1-ubuntu20.04", True), ("v1.19.1-ubuntu20.04", False)])
def test_a_cri_o_node_without_the_nvidia_handler_on_a_toolkit_that_writes_the_wrong_drop_in_dir_moves_it(
    tag: str, moved: bool
) -> None:
    """CRI-O's "failed to find runtime handler nvidia" (cri-o internal/oci/oci.go) on the operator's toolkit v1.18.1,
    which writes its drop-in to /etc/crio/conf.d: the policy's toolkit version v1.19.1 first, the rewrite after; on
    v1.19.1 itself, the rewrite alone."""
    sim = build(load_scenario("op-runtime-not-configured"))
    _image("nvidia-container-toolkit", f"nvcr.io/nvidia/k8s/container-toolkit:{tag}")(sim)
    found = next(f for f in crio_without_nvidia(sim).findings if f.id == "toolkit.runtime-not-configured")
    assert any(e.startswith("release: container-toolkit.crio-drop-in-dir (") for e in found.evidence) == moved
    assert found.action is not None
    if moved:
        assert found.action.changes == {"spec": {"toolkit": {"version": "v1.19.1-ubuntu20.04"}}}
        assert "systemctl restart crio" in found.fix  # the rewrite, after the release
    else:
        assert found.action.op is FixOp.NODE


#: CRI-O failing to decode the state the nvidia runtime wrapper of a toolkit before v1.18.1 answered while no driver
#: module is loaded (NVIDIA/nvidia-container-toolkit 61f9bde's report), as the kubelet's RunContainerError message.
WRAPPER = (
    "failed to decode container status for 16779f4cd241: skipThreeBytes: expect ull, error found in #2 byte of "
    "...|nvidia drive|..., bigger context ...|nvidia driver modules are not yet loaded, invoking /|..."
)


def _run_container_error(ds: str, node: str, init: str, message: str) -> Callable[[SimCluster], None]:
    """An edit: init container ``init`` of ``ds``'s pod on ``node`` waits in RunContainerError with ``message``, as
    the kubelet shows a container the runtime could not start (its restarts kept)."""

    def edit(sim: SimCluster) -> None:
        pod = next(p for p in sim.cluster.list(POD) if name_of(p).startswith(ds) and p["spec"]["nodeName"] == node)
        status = copy.deepcopy(pod["status"])
        entry = next(e for e in status["initContainerStatuses"] if e["name"] == init)
        entry["state"] = {"waiting": {"reason": "RunContainerError", "message": message}}
        sim.cluster.patch_status(POD, name=name_of(pod), status=status, namespace=namespace_of(pod))

    return edit


def test_operands_the_cri_o_runtime_handler_cannot_read_move_the_toolkit_to_the_release_whose_wrapper_is_quiet() -> (
    None
):
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: a}\n  - {name: b, containerRuntime: cri-o://1.31.2}\n",
        _image("nvidia-container-toolkit", "nvcr.io/nvidia/k8s/container-toolkit:v1.18.0"),
        _failing("nvidia-operator-validator", "b", init="toolkit-validation"),
        _run_container_error("nvidia-operator-validator", "b", "toolkit-validation", WRAPPER),
    )
    found = next(f for f in report.findings if f.root)
    assert (found.link, found.node) == ("toolkit", "b")
    assert found.action is not None and found.action.changes == {"spec": {"toolkit": {"version": "v1.18.1"}}}
    assert any(e.startswith("release: container-toolkit.wrapper-stdout (") for e in found.evidence)


#: Under mig-strategy mixed with a MIG-enabled GPU that has no MIG device (internal/rm/device_map.go@v0.15.0
#: "device %v has an invalid MIG configuration" in its wrappers).
EMPTY_MIG = (
    "E0412 10:02:11.004512       1 main.go:173] failed to construct NVML resource managers: error building device "
    "map: invalid MIG configuration: at least one device with migEnabled=true was not configured correctly: device 0 "
    "has an invalid MIG configuration"
)


@pytest.mark.parametrize(("tag", "named"), [("v0.15.0", True), ("v0.16.2", False)])
def test_a_mig_gpu_without_instances_is_the_mig_layout_with_the_plugin_release_that_only_warns_beside_it(
    tag: str, named: bool
) -> None:
    root = _root(tag, EMPTY_MIG)
    assert (root.id, root.link) == ("mig.no-instances", "mig")
    assert any(e.startswith("release: k8s-device-plugin.mixed-empty-mig (") for e in root.evidence) == named
    assert (f"{REPO}:v0.16.0" in root.fix) == named


@pytest.mark.parametrize(("chart", "upgraded"), [("0.16.1", True), ("0.16.2", False)])
def test_a_plugin_chart_that_drops_sys_admin_for_volume_mounts_is_upgraded_to_the_chart_that_grants_it(
    chart: str, upgraded: bool
) -> None:
    """NVIDIA/k8s-device-plugin#856: chart 0.16.1 renders no SYS_ADMIN for volume-mounts; 0.16.2 does, so a 0.16.2
    release without it had its securityContext overridden, and the patch (and the values) is the repair there."""
    labels = {"helm.sh/chart": f"nvidia-device-plugin-{chart}", "app.kubernetes.io/instance": "nvdp"}
    (root,) = [f for f in without_sys_admin(**labels).findings if f.root]
    assert root.id == "device-plugin.privileges-missing"
    assert root.fix.startswith("helm upgrade nvdp ") == upgraded and ("--version 0.16.2" in root.fix) == upgraded
    assert any(
        e.startswith("release: nvidia-device-plugin-chart.volume-mounts-sys-admin (") for e in root.evidence
    ) == (upgraded)


#: runc's bind mount of a driver file a CDI specification names by its version, after the host's driver moved from
#: 535.161.08 to 535.183.01 (opencontainers/runc libcontainer/rootfs_linux.go@v1.1.12 "error mounting %q to rootfs at
#: %q: %w"; NVIDIA's CDI page: a new specification after a driver change). Shaped after tests/sim/heldout60 h60-04.
STALE_CDI = (
    "Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
    "failed: unable to start container process: error during container init: error mounting "
    '"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.161.08" to rootfs at "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.'
    '535.161.08": stat /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.161.08: no such file or directory: unknown'
)


def test_a_driver_file_a_stale_cdi_spec_names_is_the_spec_regenerated() -> None:
    hook = _hook(PLUGIN, _refused(STALE_CDI))
    assert hook.link == "toolkit" and "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in hook.fix
    assert any("runc.cdi-driver-file-missing" in e for e in hook.evidence)
    other = STALE_CDI.replace("libnvidia-ml.so.535.161.08", "models/llama.gguf")
    assert not any(
        f.id == "workload.runtime-hook-failed" and "cdi generate" in f.fix
        for f in diagnosed(PLUGIN + JOB, _refused(other)).findings
    )
