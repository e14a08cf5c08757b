"""Every fix the doctor renders is the action that repairs (issue 26): the command, the key and its value, the
node to reimage, never the diagnosis restated or the next diagnostic step ("check ...", "look at ...",
``kubectl describe``/``logs``/``get``). Held over every finding the built-in scenarios produce, over every
catalog entry's repair, and over the fixes built from evidence where a rule once told the user to go and find
the value (the node's containerd socket, an unknown line's link)."""

from __future__ import annotations

import re

import pytest
from doctor.small_cluster import crash_looping, diagnosed, no_gpus, plugin_image, plugin_pod

from gpuchain.doctor import catalog, run_doctor
from gpuchain.doctor.model import FixOp
from gpuchain.doctor.releases import NEWEST
from gpuchain.kube import NODE
from gpuchain.sim import build, load_scenario, scenario_names
from gpuchain.sim.build import SimCluster

#: How a diagnostic step begins: a verb that asks the user to find something out, or a read-only command.
DIAGNOSTIC = re.compile(
    r"^(check|inspect|investigate|look|verify|see|find|examine|confirm|determine|debug|diagnose|review|read|"
    r"kubectl( -n \S+)? (get|describe|logs)|journalctl|dmesg|crictl (ps|logs|inspect)|its last error line|"
    r"it left no)\b",
    re.IGNORECASE,
)


def diagnostic(fix: str) -> bool:
    """Is ``fix`` a diagnostic step rather than an action (a leading shell-comment mark aside)?"""
    return bool(DIAGNOSTIC.match(fix.lstrip("# ").strip()))


def test_the_rule_tells_a_step_from_an_action() -> None:
    assert diagnostic("# check the GPU's power cabling")
    assert diagnostic("kubectl -n gpu-operator logs nvidia-driver-x --previous")
    assert diagnostic("Look at the kubelet's journal")
    assert not diagnostic("kubectl label node gpu-1 nvidia.com/device-plugin.config=default --overwrite")
    assert not diagnostic("# reboot the node so the kernel loads the module of the installed driver")


@pytest.mark.parametrize("name", scenario_names())
def test_no_finding_of_a_scenario_gets_a_diagnostic_step_for_a_fix(name: str) -> None:
    sim = build(load_scenario(name))
    report = run_doctor(sim.cluster, reader=sim.read_log)
    steps = [(f.id, f.fix) for f in report.findings if diagnostic(f.fix)]
    assert not steps, steps


def test_no_catalog_entry_repairs_with_a_diagnostic_step() -> None:
    steps = [(e.id, e.fix) for e in catalog.entries() if diagnostic(e.fix)]
    assert not steps, steps


def test_a_line_no_entry_knows_gets_the_links_action_first_and_the_line_after() -> None:
    """An operand's unknown last line: the fix opens with the link's action; the line is quoted after it."""
    line = "E0101 12:00:00.000000       1 main.go:9] frobnicator exploded"
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, hostDriver: 550.54.15}\n",
        no_gpus("n1"),
        plugin_pod("n1", crash_looping("nvidia-device-plugin-ctr", restarts=4), f"starting\n{line}"),
    )
    found = next(f for f in report.findings if f.id == "device-plugin.not-ready")
    assert not diagnostic(found.fix), found.fix
    # The plugin runs an older release than NVIDIA's newest: moving to it is the action, the line quoted after it.
    assert found.fix.startswith(
        f"kubectl -n kube-system set image ds/nvidia-device-plugin-daemonset nvidia-device-plugin-ctr="
        f"nvcr.io/nvidia/k8s-device-plugin:{NEWEST['k8s-device-plugin']}"
    )
    assert "frobnicator exploded" in found.fix
    # The warning that reports the line as unrecognised names the same release, not "no repair known".
    odd = next(f for f in report.findings if f.id == "log.unrecognised")
    assert odd.fix.startswith("# move the device plugin to NVIDIA's newest release, k8s-device-plugin:"), odd.fix


def test_a_line_no_entry_knows_on_the_newest_release_gets_the_links_next_action() -> None:
    """A plugin already at the newest release is not told to move to it: the link's own next action stays."""
    line = "E0101 12:00:00.000000       1 main.go:9] frobnicator exploded"
    newest = f"nvcr.io/nvidia/k8s-device-plugin:{NEWEST['k8s-device-plugin']}"
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, hostDriver: 550.54.15}\n",
        no_gpus("n1"),
        plugin_pod("n1", crash_looping("nvidia-device-plugin-ctr", restarts=4), f"starting\n{line}"),
        plugin_image(newest),
    )
    found = next(f for f in report.findings if f.id == "device-plugin.not-ready")
    assert (
        found.fix.startswith("# move the device plugin to NVIDIA's newest release") and "ctr=nvcr.io" not in found.fix
    )


def test_an_image_that_is_not_nvidias_plugin_is_moved_to_its_own_newest_release() -> None:
    """A DRA driver's kubelet plugin (or a vendor's own build) failing on the device plugin's link: the release to
    move is that image's, never NVIDIA's k8s-device-plugin it does not run."""
    line = "E0101 12:00:00.000000       1 main.go:9] frobnicator exploded"
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, hostDriver: 550.54.15}\n",
        no_gpus("n1"),
        plugin_pod("n1", crash_looping("nvidia-device-plugin-ctr", restarts=4), f"starting\n{line}"),
        plugin_image("registry.example.com/gpu/vendor-device-plugin:v3.1.0"),
    )
    found = next(f for f in report.findings if f.id == "device-plugin.not-ready")
    assert found.fix.startswith("# move vendor-device-plugin (the image runs v3.1.0) to vendor-device-plugin's newest")
    assert "k8s-device-plugin" not in found.fix and "frobnicator exploded" in found.fix


def test_the_toolkit_that_cannot_signal_containerd_is_given_the_socket_kubeadm_recorded() -> None:
    """A kubeadm node whose containerd listens elsewhere than the default: kubeadm's own annotation of the CRI
    socket (kubernetes cmd/kubeadm/app/constants/constants.go@v1.34.4 AnnotationKubeadmCRISocket) is the value,
    not a search for it on the node."""
    socket = "/var/run/containerd-gpu/containerd.sock"

    def kubeadm(sim: SimCluster) -> None:
        for node in ("gpu-0", "gpu-1"):
            sim.cluster.patch(
                NODE,
                name=node,
                patch={"metadata": {"annotations": {"kubeadm.alpha.kubernetes.io/cri-socket": f"unix://{socket}"}}},
            )
            info = sim.cluster.get(NODE, name=node)["status"]["nodeInfo"]
            sim.cluster.patch_status(NODE, name=node, status={"nodeInfo": {**info, "kubeletVersion": "v1.31.4"}})

    sim = build(load_scenario("op-toolkit-k3s-socket"))
    kubeadm(sim)
    report = run_doctor(sim.cluster, reader=sim.read_log)
    found = next(f for f in report.findings if f.id == "toolkit.not-ready")
    assert found.action is not None and found.action.op is FixOp.PATCH_POLICY
    env = found.action.changes["spec"]["toolkit"]["env"]
    assert {"name": "CONTAINERD_SOCKET", "value": socket} in env
    assert not diagnostic(found.fix)


def test_a_catalog_repair_is_filled_with_the_node_namespace_and_pod_the_evidence_names() -> None:
    """k8s-device-plugin.config-symlink's repair names ``kubectl -n <namespace> delete pod <plugin pod>``: the
    finding's fix carries the plugin pod's own namespace and name, so it pastes as it stands."""
    entry = catalog.entry("k8s-device-plugin.config-symlink")
    assert "<plugin pod>" in entry.fix
    filled = entry.repair("gpu-1", namespace="nvidia-device-plugin", pod="nvidia-device-plugin-daemonset-x2x4k")
    assert "kubectl -n nvidia-device-plugin delete pod nvidia-device-plugin-daemonset-x2x4k" in filled
    assert "<" not in filled.split("(")[1].split(")")[0]
    # A placeholder the evidence does not fill stays for the user, never an empty word.
    assert "<layout>" in catalog.entry("mig-manager.validate-config-failed").repair("gpu-1")
