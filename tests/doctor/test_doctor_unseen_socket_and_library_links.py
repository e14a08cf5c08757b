"""Two classes where a host path the component looks for is not the one the host's own setup made (issue 26):

- the device plugin dials the kubelet's registration socket, kubelet.sock, in the device-plugins directory its
  hostPath mounts (kubernetes/kubelet pkg/apis/deviceplugin/v1beta1/constants.go@v0.33.0: DevicePluginPath
  "/var/lib/kubelet/device-plugins/", KubeletSocket under it) and logs "Could not register device plugin: %s"
  (NVIDIA/k8s-device-plugin internal/plugin/server.go@v0.17.1) with the dial's error; on a kubelet of 1.10 or
  later, whose DevicePlugins gate is on by default (kubernetes pkg/features/kube_features.go@v1.10.0), "no such
  file or directory" is a kubelet serving the socket elsewhere: the node's kubelet setup (a containerised kubelet
  without the host's directory bound: RKE1 nodes carry rke.cattle.io/* annotations, rancher/rke
  k8s/node.go; or a --root-dir such as k0s' /var/lib/k0s/kubelet);
- NVIDIA's DRA kubelet plugin looks the driver's NVML up by its SONAME link, libnvidia-ml.so.1, under its driver
  root (NVIDIA/k8s-dra-driver-gpu nvml DriverRoot.findFile: "error locating %q"; nvlib.go newDeviceLib "failed to
  locate driver libraries: %w"; "failed to create device library: %w" around it): with the root where the host's
  driver is, that name is the ldconfig-made link of the host's driver install.
"""

from __future__ import annotations

from collections.abc import Callable

from doctor.small_cluster import diagnosed, no_gpus, plugin_pod
from test_doctor_silent_pods import CRASH, DONE, DRA_DS, DRA_NS, HOST_DRA, dra_release

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.doctor.shapes import PROVIDERS
from gpuchain.kube import NODE
from gpuchain.sim.build import SimCluster

RUNNING = {"name": "nvidia-device-plugin-ctr", "restarts": 0, "ready": True, "state": {"running": True}}
#: The plugin's line for a dial that found no socket file (its format above, grpc-go's dial error in it).
NO_SOCKET = (
    'Could not register device plugin: rpc error: code = Unavailable desc = connection error: desc = "transport: '
    'Error while dialing dial unix /var/lib/kubelet/device-plugins/kubelet.sock: connect: no such file or directory"\n'
)
#: The same dial answered by no listener: a kubelet restarting, whose socket file is there.
REFUSED = NO_SOCKET.replace("no such file or directory", "connection refused")


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _plugin_node(kubelet: str, runtime: str, log: str, *edits: Callable[[SimCluster], object]) -> Report:
    """The standalone plugin running on node k of ``kubelet`` and ``runtime``, no GPU announced, ``log`` its log."""
    node = {**no_gpus("k"), "nodeInfo": {"kubeletVersion": kubelet, "containerRuntimeVersion": runtime}}
    scenario = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: k, preset: t4-x4, hostDriver: '550.54.15'}\n"
    return diagnosed(scenario, node, plugin_pod("k", RUNNING, log), *edits)


def _annotated(key: str, value: str) -> Callable[[SimCluster], object]:
    """An edit: node k annotated ``key``: ``value``."""
    return lambda sim: sim.cluster.patch(NODE, name="k", patch={"metadata": {"annotations": {key: value}}})


def test_a_plugin_finding_no_kubelet_socket_under_a_gated_on_kubelet_is_the_node_with_the_kubelets_bind() -> None:
    (root,) = _roots(_plugin_node("v1.13.5", "docker://18.6.3", NO_SOCKET))
    assert (root.id, root.link, root.node) == ("node.kubelet-socket-unseen", "node", "k")
    assert root.fix.index("services.kubelet.extra_binds") < root.fix.index("hostPath")
    assert "rke up" in root.fix


def test_a_kubelet_with_another_root_dir_gets_the_plugins_hostpath_patched_on_the_plugins_link() -> None:
    (root,) = _roots(_plugin_node("v1.27.2+k0s", "containerd://1.7.13", NO_SOCKET))
    assert (root.id, root.link) == ("node.kubelet-socket-unseen", "device-plugin")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    (volume,) = root.action.changes["spec"]["template"]["spec"]["volumes"]
    assert volume["hostPath"] == {"path": "/var/lib/k0s/kubelet/device-plugins"}
    assert "--type strategic" in root.fix and root.fix.index("k0s") < root.fix.index("extra_binds")


#: The plugin's words, before v0.9.0, when it cannot watch its device-plugins directory (NVIDIA/k8s-device-plugin
#: main.go@1.0.0-beta4: "Failed to created FS watcher.", after fsnotify's Add of pluginapi.DevicePluginPath failed).
UNWATCHED = "Loading NVML\nFetching devices.\nStarting FS watcher.\nFailed to created FS watcher.\n"


def test_an_unwatched_plugin_directory_under_a_k3s_before_its_default_path_is_k3s_own_kubelet_root() -> None:
    # k3s-io/k3s#1416 (and #1420 for 1.17): K3s serves device plugins under /var/lib/kubelet from 1.17.3 on.
    (root,) = _roots(_plugin_node("v1.16.2-k3s.1", "docker://19.3.4", UNWATCHED))
    assert (root.id, root.link, root.node) == ("node.kubelet-socket-unseen", "device-plugin", "k")
    assert root.action is not None and root.action.op is FixOp.PATCH_DAEMONSET
    assert "/var/lib/rancher/k3s/agent/kubelet/device-plugins" in root.fix
    assert any("Failed to created FS watcher." in e for e in root.evidence)
    # A K3s that serves the default path names no K3s directory: the kubelet's root is unknown.
    (root,) = _roots(_plugin_node("v1.28.5+k3s1", "containerd://1.7.11-k3s2", UNWATCHED))
    assert root.id == "node.kubelet-socket-unseen" and "<kubelet --root-dir>/device-plugins" in root.fix
    assert root.action is not None and root.action.op is FixOp.NODE


def test_rke_annotations_put_the_kubelet_containers_bind_first_whatever_the_runtime_says() -> None:
    rke = _annotated("rke.cattle.io/internal-ip", "10.0.0.7")
    (root,) = _roots(_plugin_node("v1.20.15", "containerd://1.6.8", NO_SOCKET, rke))
    assert root.fix.index("extra_binds") < root.fix.index("hostPath")
    assert "annotation rke.cattle.io/internal-ip" in root.evidence


def test_a_refused_dial_or_an_old_kubelet_is_not_the_unseen_socket() -> None:
    assert "node.kubelet-socket-unseen" not in _plugin_node("v1.13.5", "docker://18.6.3", REFUSED).ids
    old = _plugin_node("v1.9.11", "docker://17.3.2", NO_SOCKET)
    assert "node.kubelet-socket-unseen" not in old.ids and "node.device-plugins-disabled" in old.ids


#: The DRA plugin's line for a driver root without libnvidia-ml.so.1 (its formats above, nested as it wraps them).
UNLOCATED = (
    'Error: failed to create device library: failed to locate driver libraries: error locating "libnvidia-ml.so.1"'
)


def _dra_log(text: str) -> Callable[[SimCluster], None]:
    """An edit: ``text`` as the DRA plugin container's log."""

    def edit(sim: SimCluster) -> None:
        sim.cluster.set_logs(f"{DRA_DS}-7xk2p", namespace=DRA_NS, container="gpus", text=text)

    return edit


def test_a_dra_plugin_missing_the_nvml_link_under_the_host_drivers_root_is_the_driver_and_ldconfig() -> None:
    (root,) = _roots(diagnosed(HOST_DRA, dra_release("n1", DONE, CRASH, "/"), _dra_log(UNLOCATED)))
    assert (root.id, root.link, root.node) == ("driver.library-unlinked", "driver", "n1")
    assert "run ldconfig on the host" in root.fix and "libnvidia-ml.so.1" in root.fix
    assert root.action is not None and root.action.changes["drain"] is False


def test_the_missing_link_is_not_the_hosts_where_the_plugins_root_is_elsewhere() -> None:
    report = diagnosed(HOST_DRA, dra_release("n1", DONE, CRASH, "/opt/nvidia"), _dra_log(UNLOCATED))
    assert "driver.library-unlinked" not in report.ids


def test_a_missing_driver_library_by_its_soname_names_ldconfig_beside_the_driver_packages() -> None:
    """Any operand's ENOENT for the driver's .so.1 (glibc's "cannot open shared object file") reads the same provider:
    the host's packages, or ldconfig where the versioned file is there."""
    provider = next(p for p in PROVIDERS if p.pattern.search("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"))
    action = provider.action.format(path="libnvidia-ml.so.1")
    assert "run ldconfig on the host" in action and "but not libnvidia-ml.so.1" in action
    assert "libnvidia-compute-<branch>" in action
