"""Fixes that are releases (issue 26 items 1 and 4): where the message or the state a finding reads is a defect
that the component's own release notes say a later release fixed (releases.yaml), the fix names the release to move
to, read from the pod's image tag where it runs one (the exact ``kubectl set image``, the policy's version, the
chart release), and the condition on the release where the component is installed on the host."""

from __future__ import annotations

import copy
from typing import Any

from doctor.small_cluster import crash_looping, diagnosed, toolkit_pod
from sim.heldout import harness

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.kube import POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster

NODE = "gpu-worker-3"
PLUGIN = f"name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: {NODE}}}\n"
OPERATOR = f"name: t\nstack: gpu-operator\nnodes:\n  - {{name: {NODE}}}\n"
#: dcgm-exporter 2.4.6-2.6.8's last words on V100 and A100 nodes (NVIDIA/dcgm-exporter#80; go-dcgm
#: pkg/dcgm/topology.go "Error getting device busid: %s" with DCGM's "API version mismatch").
EXPORTER_LOG = (
    'time="2022-07-19T14:22:41Z" level=info msg="DCGM successfully initialized!"\n'
    'time="2022-07-19T14:22:41Z" level=fatal msg="Error getting device busid: API version mismatch"\n'
)
#: GFD v0.8.0 reading a config whose deviceListStrategy is a list (api/config/v1/config.go "unmarshal error: %v"
#: around sigs.k8s.io/yaml's and encoding/json's words), as klog writes the error main.go returns.
GFD_LOG = (
    "E0712 09:14:02.118431       1 main.go:95] unable to load config: unable to finalize config: unable to parse "
    "config file: error parsing config file: unmarshal error: error unmarshaling JSON: while decoding JSON: json: "
    "cannot unmarshal array into Go struct field PluginCommandLineFlags.flags.plugin.deviceListStrategy of type string\n"
)


def _root(report: Report) -> Finding:
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    return root


def _image(prefix: str, image: str) -> Any:
    """An edit: every container of the pods named ``prefix``-* runs ``image``."""

    def edit(sim: SimCluster) -> None:
        for pod in [p for p in sim.cluster.list(POD) if name_of(p).startswith(prefix)]:
            spec = copy.deepcopy(pod["spec"])
            for c in spec["containers"]:
                c["image"] = image
            sim.cluster.patch(POD, name=name_of(pod), patch={"spec": spec}, namespace=namespace_of(pod))

    return edit


def _standalone(name: str, image: str, log: str, **labels: str) -> list[dict[str, Any]]:
    """Edits: a DaemonSet ``name`` of its own in namespace monitoring (no stack manages it), its pod on NODE
    crash-looping with ``log``."""
    return [
        {
            "do": "add-daemonset",
            "namespace": "monitoring",
            "name": name,
            "labels": {"app.kubernetes.io/name": name, **labels},
            "containers": [name],
            "image": image,
            "nodes": [NODE],
        },
        {
            "do": "pod",
            "daemonset": name,
            "namespace": "monitoring",
            "node": NODE,
            "containers": [crash_looping(name)],
            "logs": {name: log},
        },
    ]


def test_a_standalone_exporter_on_the_release_with_the_api_mismatch_gets_the_exact_image_to_set() -> None:
    """NVIDIA/dcgm-exporter#80: 2.4.6-2.6.8 exits "Error getting device busid: API version mismatch" on a plain
    DaemonSet; 2.4.6-2.6.9 updated the go-dcgm bindings (go.mod@830ce06). No stack ships it, so the fix is the
    image to set, with the container's name and the tag's OS suffix kept."""
    report = diagnosed(
        PLUGIN, *_standalone("dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:2.4.6-2.6.8-ubuntu20.04", EXPORTER_LOG)
    )
    root = _root(report)
    assert (root.link, root.node) == ("exporter", NODE)
    assert root.fix.startswith(
        "kubectl -n monitoring set image ds/dcgm-exporter dcgm-exporter=nvcr.io/nvidia/k8s/dcgm-exporter:2.4.6-2.6.9-ubuntu20.04"
    )
    assert "2.3.5-2.6.5" in root.fix and "release the stack ships" not in root.fix
    assert any(e.startswith("release: dcgm-exporter.go-dcgm-api-mismatch (") for e in root.evidence)
    assert "log.unrecognised" not in report.ids


def test_an_exporter_release_without_the_defect_gets_the_catalogs_repair_not_a_release() -> None:
    later = _standalone("dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:2.4.6-2.6.10-ubuntu20.04", EXPORTER_LOG)
    root = _root(diagnosed(PLUGIN, *later))
    assert root.link == "exporter" and root.fix.startswith("# run a dcgm-exporter image")
    assert not any(e.startswith("release: ") for e in root.evidence)


def test_the_operators_exporter_on_that_release_is_moved_by_the_policy() -> None:
    report = diagnosed(
        OPERATOR,
        _image("nvidia-dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:2.4.6-2.6.8-ubuntu20.04"),
        {
            "do": "pod",
            "daemonset": "nvidia-dcgm-exporter",
            "node": NODE,
            "containers": [crash_looping("nvidia-dcgm-exporter")],
            "logs": {"nvidia-dcgm-exporter": EXPORTER_LOG},
        },
    )
    root = _root(report)
    assert root.link == "exporter" and root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes == {"spec": {"dcgmExporter": {"version": "2.4.6-2.6.9-ubuntu20.04"}}}


def test_gfd_of_the_plugin_chart_that_cannot_read_a_list_is_moved_to_the_chart_release_that_can() -> None:
    """k8s-device-plugin CHANGELOG.md@v0.14.1: "Fix parsing of `deviceListStrategy` ... strings as well as slices",
    "Update GFD subchart to v0.8.1"; chart 0.14.0 runs GFD v0.8.0, which reads the field as one string."""
    chart = {"helm.sh/chart": "nvidia-device-plugin-0.14.0", "app.kubernetes.io/instance": "nvdp"}
    edits = _standalone("nvdp-gpu-feature-discovery", "nvcr.io/nvidia/gpu-feature-discovery:v0.8.0", GFD_LOG, **chart)
    root = _root(diagnosed(PLUGIN, *edits))
    assert (root.link, root.node) == ("gfd", NODE)
    assert root.fix.startswith("helm upgrade nvdp ") and "--version 0.14.1" in root.fix
    assert "deviceListStrategy" in root.fix  # the workaround beside it
    # Without a chart, the GFD image itself.
    plain = _standalone("gpu-feature-discovery", "nvcr.io/nvidia/gpu-feature-discovery:v0.8.0", GFD_LOG)
    root = _root(diagnosed(PLUGIN, *plain))
    assert root.fix.startswith(
        "kubectl -n monitoring set image ds/gpu-feature-discovery "
        "gpu-feature-discovery=nvcr.io/nvidia/gpu-feature-discovery:v0.8.1"
    )


def test_running_gpu_pods_losing_nvml_on_a_host_toolkit_name_the_toolkit_release_before_the_workaround() -> None:
    """nvidia-container-toolkit CHANGELOG.md@v1.14.6: nvidia-ctk reads the 550 driver's "nvidia" device name;
    before it the /dev/char links cannot be made, so the workaround alone does not hold. The host's toolkit shows
    no version: the fix says which release to move to, if it runs an older one."""
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: gpu-1, lostDeviceRules: true}\n"
        "workloads:\n  - {name: train, gpus: 8, node: gpu-1}\n"
    )
    (lost,) = [f for f in report.findings if f.id == "workload.nvml-lost"]
    assert (
        "if its NVIDIA Container Toolkit predates v1.14.6, upgrade the NVIDIA Container Toolkit to >= v1.14.6"
        in lost.fix
    )
    assert "create-dev-char-symlinks" in lost.fix
    assert any(e.startswith("release: container-toolkit.dev-char-550 (") for e in lost.evidence)


def test_the_mig_manager_wedged_at_paused_for_mig_change_is_restarted_then_moved_past_the_fix() -> None:
    """NVIDIA/mig-parted#485: from v0.13.0 a change whose operand shutdown timed out returns without restoring the
    operands (gpu.deploy.*=paused-for-mig-change, mig.config.state=pending) and waits for a label change that never
    comes; restarting the manager applies the layout again, and the fix (#484) came after v0.15.0."""
    scenario = (
        "name: t\nstack: gpu-operator\npolicy:\n  mig: {strategy: mixed}\nnodes:\n"
        f"  - {{name: {NODE}, mig: {{config: all-1g.10gb, state: pending}}}}\n"
    )
    manager = "nvcr.io/nvidia/cloud-native/k8s-mig-manager:{}-ubuntu20.04"
    report = diagnosed(scenario, _image("nvidia-mig-manager", manager.format("v0.14.0")))
    (pending,) = [f for f in report.findings if f.id == "mig.pending"]
    assert pending.action is not None and pending.action.op is FixOp.DELETE
    assert pending.action.changes["name"].startswith("nvidia-mig-manager")
    assert "v0.15.1" in pending.fix
    assert any(e.startswith("release: k8s-mig-manager.paused-for-mig-change (") for e in pending.evidence)
    # A release before the Go port (its shell script went on past the wait) is not that defect: the change may
    # still be waiting for the GPUs, so cancelling or freeing them stays the repair, with the restart beside it.
    (older,) = [
        f
        for f in diagnosed(scenario, _image("nvidia-mig-manager", manager.format("v0.12.3"))).findings
        if f.id == "mig.pending"
    ]
    assert older.action is not None and older.action.op is FixOp.LABEL_NODE and "restart the MIG manager" in older.fix


#: runc's wrapping of the hook's failure as containerd's CRI returns it (opencontainers/runc
#: libcontainer/configs/config.go@v1.2.5 "error running %s hook #%d: %w"), around nvidia-container-cli's
#: "device error: %s" (NVIDIA/libnvidia-container src/cli/configure.c) for a volume-mounts device list.
UNKNOWN_DEVICE = (
    "Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
    "failed: unable to start container process: error during container init: error running hook #0: error running "
    "hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\nnvidia-container-cli: device error: "
    "/var/run/nvidia-container-devices: unknown device: unknown"
)


def _refused(message: str) -> Any:
    """An edit: the GPU workload job-* refused at start by the runtime, its message in the kubelet's Failed Event."""

    def edit(sim: SimCluster) -> None:
        pod = next(p for p in sim.cluster.list(POD) if name_of(p).startswith("job"))
        status = copy.deepcopy(pod["status"])
        status["containerStatuses"][0].update(
            ready=False,
            restartCount=3,
            state={"waiting": {"reason": "CrashLoopBackOff"}},
            lastState={"terminated": {"reason": "StartError", "exitCode": 128}},
        )
        sim.cluster.patch_status(POD, name=name_of(pod), status=status, namespace=namespace_of(pod))
        harness._event(sim.cluster, pod, {"reason": "Failed", "message": message})

    return edit


def test_a_hook_that_takes_the_volume_mounts_list_for_a_device_names_the_toolkit_release_even_on_a_node_image() -> None:
    """nvidia-container-toolkit CHANGELOG.md@v1.14.1: "Fixed bug where contents of
    `/etc/nvidia-container-runtime/config.toml` is ignored by the NVIDIA Container Runtime Hook". On an EKS node
    built from the user's own AMI the repair is that toolkit release (or back to v1.13.5), not another EKS AMI."""
    report = diagnosed(
        "name: t\nstack: eks\nnodes:\n  - {name: a}\nworkloads:\n  - {name: job, gpus: 1, node: a}\n",
        _refused(UNKNOWN_DEVICE),
    )
    (hook,) = [f for f in report.findings if f.id == "workload.runtime-hook-failed"]
    assert hook.link == "toolkit"
    assert "upgrade the NVIDIA Container Toolkit to >= v1.14.1 (or back to v1.13.5)" in hook.fix
    assert "accept-nvidia-visible-devices-as-volume-mounts" in hook.fix
    assert any(e.startswith("release: container-toolkit.hook-ignores-config (") for e in hook.evidence)


#: The toolkit v1.17.0's last words on k3s (NVIDIA/nvidia-container-toolkit pkg/config/toml/source-cli.go@v1.17.0).
CONFIG_DUMP_LOG = (
    'time="2024-11-01T14:02:11Z" level=error msg="error running nvidia-toolkit: unable to determine runtime '
    "options: unable to load containerd config: failed to load config: failed to run command chroot [/host "
    'containerd config dump]: exit status 127"\n'
)


def test_on_the_operator_release_that_shipped_that_toolkit_the_operator_is_upgraded() -> None:
    """The GPU Operator v24.9.0 (its validator pods' image) shipped toolkit v1.17.0; v24.9.1 fixed it (its release
    notes, releases.yaml gpu-operator.k3s-toolkit-config-dump): the operator's upgrade, the toolkit pin until then."""
    root = _root(diagnosed(OPERATOR, toolkit_pod(NODE, CONFIG_DUMP_LOG)))
    assert root.link == "toolkit" and "upgrade the GPU Operator to v24.9.1" in root.fix
    assert "toolkit.version=v1.17.1" in root.fix


def test_the_operators_toolkit_on_the_release_that_only_runs_config_dump_is_moved_by_the_policy() -> None:
    """nvidia-container-toolkit CHANGELOG.md@v1.17.1: "Fallback to using a config file if the current runtime config
    can not be determined from the command line"; the toolkit image v1.17.0-ubuntu20.04, pinned under an operator
    (v24.6.2, its validator's release) whose own release did not ship it, fails on k3s."""
    report = diagnosed(
        OPERATOR + "policy: {validator: {version: v24.6.2}}\n",
        toolkit_pod(NODE, CONFIG_DUMP_LOG),
    )
    root = _root(report)
    assert root.link == "toolkit" and root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes == {"spec": {"toolkit": {"version": "v1.17.1-ubuntu20.04"}}}
    assert "RUNTIME_CONFIG_SOURCE=file" in root.fix  # the catalog's other way beside it


def test_a_standalone_plugin_whose_cdi_library_fails_on_mig_devices_gets_the_release_that_fixed_it() -> None:
    """NVIDIA/nvidia-container-toolkit internal/platform-support/dgpu/nvml.go@v1.16.0 compares a nil error with
    nvml.SUCCESS ("error getting GPU minor: %v" prints <nil>); k8s-device-plugin CHANGELOG.md@v0.16.1 bumps the
    toolkit to v1.16.1 for it. A later plugin with the same words is not that defect."""
    log = (
        "E0903 10:11:12.000000       1 main.go:177] error starting plugins: error creating plugin manager: unable to "
        "create cdi spec file: failed to get CDI spec: failed to create device CDI specs: failed to get CDI device "
        "specs for MIG devices: error getting GPU minor: <nil>\n"
    )

    def plugin_at(tag: str) -> list[Any]:
        return [
            _image("nvidia-device-plugin", f"nvcr.io/nvidia/k8s-device-plugin:{tag}"),
            {
                "do": "pod",
                "daemonset": "nvidia-device-plugin-daemonset",
                "node": NODE,
                "containers": [crash_looping("nvidia-device-plugin-ctr")],
                "logs": {"nvidia-device-plugin-ctr": log},
            },
        ]

    root = _root(diagnosed(PLUGIN, *plugin_at("v0.16.0")))
    assert root.link == "device-plugin"
    assert (
        "set image ds/nvidia-device-plugin-daemonset nvidia-device-plugin-ctr=nvcr.io/nvidia/k8s-device-plugin:v0.16.1"
        in root.fix
    )
    later = _root(diagnosed(PLUGIN, *plugin_at("v0.16.2")))
    assert later.link == "device-plugin" and "set image" not in later.fix


def test_the_operators_toolkit_that_cannot_read_containerd_config_version_3_is_moved_to_the_release_that_can() -> None:
    """nvidia-container-toolkit CHANGELOG.md@v1.17.4: "Add support for containerd version 3 config"; v1.17.0's
    pkg/config/engine/containerd/containerd.go still returns "unsupported config version: %v" for 3."""
    log = 'time="2025-03-01T10:00:00Z" level=fatal msg="error running nvidia-toolkit: unsupported config version: 3"\n'
    report = diagnosed(
        OPERATOR,
        toolkit_pod(NODE, log),
    )
    root = _root(report)
    assert root.action is not None and root.action.changes == {"spec": {"toolkit": {"version": "v1.17.4-ubuntu20.04"}}}
    assert any(e.startswith("release: container-toolkit.containerd-config-v3 (") for e in root.evidence)
