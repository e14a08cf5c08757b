"""The chart's optional DRA part: DeviceClass, DRA plugin DaemonSet and its RBAC."""

from __future__ import annotations

import kubernetes_validate
import pytest
from cli_parse import container_env, parse
from helm_python.errors import HelmRenderError
from test_chart import CHART, render

from gpuchain.dra.kinds import DRIVER

ON = {"dra": {"enabled": True}}


def _dra_docs() -> list[dict]:  # type: ignore[type-arg]
    off = {(d["kind"], d["metadata"]["name"]) for d in render()}
    return [d for d in render(ON) if (d["kind"], d["metadata"]["name"]) not in off]


def test_off_by_default() -> None:
    assert not [d for d in render() if "dra" in d["metadata"]["name"] or d["kind"] == "DeviceClass"]


@pytest.mark.parametrize("version", ["1.34.0", "1.36.0"])
def test_enabled_manifests_validate(version: str) -> None:
    docs = _dra_docs()
    assert sorted(d["kind"] for d in docs) == sorted(
        ["DeviceClass", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"]
    )
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_rules_are_justified_and_narrow() -> None:
    lines = (CHART / "templates" / "dra-plugin.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("- apiGroups:"):
            assert lines[i - 1].strip().startswith("#"), f"rule at line {i + 1} has no justification comment"
    role = next(d for d in _dra_docs() if d["kind"] == "ClusterRole")
    grants = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert grants == {
        ("nodes", "get"),
        ("nodes", "watch"),  # the repair loop's quarantine list (tests/peers/test_agent_roles.py)
        ("resourceslices", "get"),
        ("resourceslices", "create"),
        ("resourceslices", "patch"),
        ("resourceclaims", "get"),
    }


def test_daemonset_runs_the_dra_plugin_with_the_kubelet_paths() -> None:
    ds = next(d for d in _dra_docs() if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    container = spec["containers"][0]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {
        "/var/lib/kubelet/plugins_registry",
        f"/var/lib/kubelet/plugins/{DRIVER}",
        "/var/run/cdi",
        "/run/gpuchain/nvml",  # the NVML release board (test_chart_nvml_release.py)
    }
    params = parse([*container["command"][1:], *container["args"]], container_env(container)).params
    assert (str(params["registry_dir"]), str(params["cdi_dir"])) == (
        "/var/lib/kubelet/plugins_registry",
        "/var/run/cdi",
    )
    assert str(params["plugin_dir"]) == f"/var/lib/kubelet/plugins/{DRIVER}"


def _args(values: dict) -> list[str]:  # type: ignore[type-arg]
    ds = next(d for d in render(values) if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpuchain-dra-plugin")
    return list(ds["spec"]["template"]["spec"]["containers"][0]["args"])


def test_beside_the_device_plugin_only_labelled_nodes_are_dras() -> None:
    assert "--unlabelled-nodes=device-plugin" in _args(ON)


def test_every_gpu_node_is_dras_only_without_the_device_plugin() -> None:
    alone = {"dra": {"enabled": True, "nodes": "all"}, "devicePlugin": {"enabled": False}}
    assert "--unlabelled-nodes=dra" in _args(alone)


def test_the_chart_refuses_both_plugins_on_the_same_gpus() -> None:
    with pytest.raises(HelmRenderError, match=r"dra.nodes=all .* devicePlugin.enabled=true .* set devicePlugin"):
        render({"dra": {"enabled": True, "nodes": "all"}})
    with pytest.raises(HelmRenderError, match="dra.nodes=some: choose labelled"):
        render({"dra": {"enabled": True, "nodes": "some"}})


def test_device_taints_and_metrics_are_opt_in() -> None:
    assert not {"--device-taints"} & set(_args(ON))
    on = {"dra": {"enabled": True, "deviceTaints": True, "metricsPort": 9402}}
    assert {"--device-taints", "--metrics-port=9402"} <= set(_args(on))
    ds = next(d for d in render(on) if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpuchain-dra-plugin")
    assert ds["spec"]["template"]["spec"]["containers"][0]["ports"] == [{"name": "metrics", "containerPort": 9402}]
    kubernetes_validate.validate(ds, "1.34.0", strict=True)


def test_the_chart_refuses_the_nvidia_gpu_bridge_beside_the_device_plugin() -> None:
    """dra.extendedResource with the device plugin on: the plugin registers nvidia.com/gpu on the same
    nodes, so the chart names the setting and the way out instead of rendering both."""
    refused = r"dra.extendedResource=true .* devicePlugin.enabled=true .* set devicePlugin"
    with pytest.raises(HelmRenderError, match=refused):
        render({"dra": {"enabled": True, "extendedResource": True}})
    alone = render({"dra": {"enabled": True, "extendedResource": True}, "devicePlugin": {"enabled": False}})
    classes = {d["metadata"]["name"]: d for d in alone if d["kind"] == "DeviceClass"}
    assert sorted(classes) == ["gpu.gpuchain.io", "whole-gpu.gpuchain.io"]
    kubernetes_validate.validate(classes["whole-gpu.gpuchain.io"], "1.34.0", strict=True)
    plain = render({**ON, "devicePlugin": {"enabled": False}})
    assert not [d for d in plain if d["metadata"]["name"].startswith("whole-gpu")]


SHARES = {"dra": {"enabled": True, "gpuShares": True, "mps": {"root": "/run/gpuchain/dra-mps/"}}}


def _plugin_pod(values: dict) -> dict:  # type: ignore[type-arg]
    ds = next(d for d in render(values) if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpuchain-dra-plugin")
    return dict(ds["spec"]["template"]["spec"])


def test_gpu_shares_and_their_mps_daemons_are_opt_in() -> None:
    """Off by default: no shares, no daemon, none of the privileges and mounts the daemons need."""
    pod = _plugin_pod(ON)
    container = pod["containers"][0]
    assert not {a for a in container["args"] if a.startswith(("--gpu-shares", "--mps-root"))}
    assert "hostPID" not in pod and "initContainers" not in pod
    assert container["securityContext"] == {"allowPrivilegeEscalation": False}
    shares_only = {"dra": {"enabled": True, "gpuShares": True}}
    args = parse(["dra-plugin", *_args(shares_only)]).params
    assert (args["gpu_shares"], args["mps_root"]) == (True, None)


@pytest.mark.parametrize("version", ["1.34.0", "1.36.0"])
def test_the_mps_root_gives_the_plugin_what_its_daemons_and_their_clients_need(version: str) -> None:
    """``dra.mps.root``: the plugin runs with ``--mps-root`` at that host path (mounted at the same
    path, as the claims' CDI specs name it), the daemons' shared memory ``<root>/shm`` is a tmpfs the
    init container mounts on the host and is the plugin's ``/dev/shm``, which the specs also hand to
    the claims' containers; the host's PIDs and the driver's compute binaries, as for the device
    plugin's MPS. Every object validates."""
    from gpuchain.dra import mps
    from gpuchain.gpu.mps import MpsRoot

    pod = _plugin_pod(SHARES)
    container = pod["containers"][0]
    params = parse([*container["command"][1:], *container["args"]], container_env(container)).params
    root = "/run/gpuchain/dra-mps"
    assert (params["gpu_shares"], str(params["mps_root"])) == (True, root)
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert volumes[mounts[root]["name"]] == root and mounts[root]["mountPropagation"] == "HostToContainer"
    _, client_mounts = mps.client_edits(MpsRoot(root), "GPU-0")
    shm = next(m["hostPath"] for m in client_mounts if m["containerPath"] == "/dev/shm")
    assert volumes[mounts["/dev/shm"]["name"]] == shm == f"{root}/shm"
    pipe = next(m["hostPath"] for m in client_mounts if m["containerPath"] == mps.CLIENT_PIPE_DIR)
    assert pipe.startswith(f"{root}/")  # the daemon's pipe directory: under the root the plugin sees at the host's path
    (init,) = pod["initContainers"]
    assert init["securityContext"] == {"privileged": True}
    assert init["volumeMounts"] == [{"name": "mps-root", "mountPath": root, "mountPropagation": "Bidirectional"}]
    script = init["command"][-1]
    assert f"mkdir -p {shm}" in script and script.rstrip().endswith(f"shm {shm}") and "-t tmpfs" in script
    assert pod["hostPID"] is True and container["securityContext"] == {"privileged": True}
    assert container_env(container)["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    role = next(
        d for d in render(SHARES) if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gpuchain-dra-plugin"
    )
    # Prepare reads the pods a shared GPU's claim is reserved for (tests/dra/test_dra_mps.py)
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]} in role["rules"]
    for doc in render(SHARES):
        if doc["kind"] in ("DaemonSet", "ClusterRole", "DeviceClass"):
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_chart_refuses_an_mps_root_it_cannot_use() -> None:
    with pytest.raises(HelmRenderError, match=r"dra.mps.root=/run/x runs MPS control daemons .* dra.gpuShares=true"):
        render({"dra": {"enabled": True, "mps": {"root": "/run/x"}}})
    for bad in ("run/x", "/run/x y", "/run/$(reboot)"):
        with pytest.raises(HelmRenderError, match=r"is not an absolute host path"):
            render({"dra": {"enabled": True, "gpuShares": True, "mps": {"root": bad}}})
    shared = r"dra.mps.root=/run/nvidia/mps is devicePlugin.mps.root too: .* stops the MPS daemons"
    for root in ("/run/nvidia/mps", "/run/nvidia/mps/"):  # the device plugin's default
        with pytest.raises(HelmRenderError, match=shared):
            render({"dra": {"enabled": True, "gpuShares": True, "mps": {"root": root}}})
    alone = {
        "dra": {"enabled": True, "gpuShares": True, "mps": {"root": "/run/nvidia/mps"}},
        "devicePlugin": {"enabled": False},
    }
    assert "--mps-root=/run/nvidia/mps" in _args(alone)


def test_partitionable_mig_is_opt_in_and_only_then_may_the_plugin_patch_its_node() -> None:
    """The Node annotation that keeps the MIG manager off the DRA driver's MIG GPUs is written only with
    --partitionable-mig, so the role grants patch on Nodes only with dra.partitionableMig (a role grants
    what its agent does: tests/peers/test_agent_roles.py)."""
    on = {"dra": {"enabled": True, "partitionableMig": True}}
    assert "--partitionable-mig" not in _args(ON) and "--partitionable-mig" in _args(on)

    def node_verbs(values: dict) -> set[str]:  # type: ignore[type-arg]
        role = next(
            d for d in render(values) if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gpuchain-dra-plugin"
        )
        return {v for rule in role["rules"] if "nodes" in rule["resources"] for v in rule["verbs"]}

    assert node_verbs(ON) == {"get", "watch"}
    assert node_verbs(on) == {"get", "watch", "patch"}
    assert parse(["dra-plugin", *_args(on)]).params["partitionable_mig"] is True
