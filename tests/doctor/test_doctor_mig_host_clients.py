"""A MIG change left 'pending' by a MIG manager that serves a host-installed driver and so stops the host's GPU
clients through systemd (WITH_SHUTDOWN_HOST_GPU_CLIENTS=true, set by the operator when spec.driver.enabled=false), on
a node OS with no systemd: the repair is that env set to false, not cancelling the change or draining the node."""

from __future__ import annotations

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report

#: The MIG manager's settings as its entrypoint prints them, then mig-parted's first line of the change
#: (cmd/nvidia-mig-manager/main.go "Updating to MIG config: %s"), and nothing after it.
LOG = (
    "IS_HOST_DRIVER=true\nWITH_SHUTDOWN_HOST_GPU_CLIENTS=true\nStarting nvidia-mig-manager\n"
    'time="2026-03-01T10:00:00Z" level=info msg="Waiting for change to \'nvidia.com/mig.config\' label"\n'
    'time="2026-03-01T10:00:01Z" level=info msg="Updating to MIG config: all-3g.40gb"\n'
)


def _scenario(os_image: str) -> str:
    return (
        "name: t\nstack: gpu-operator\npolicy: {driver: {enabled: false}, toolkit: {enabled: false}}\nnodes:\n"
        f"  - {{name: m1, preset: a100-80gb-x8, hostDriver: '570.172.08', osImage: '{os_image}', "
        "mig: {config: all-3g.40gb, state: pending}}\n"
    )


EDITS = (
    {
        "do": "node",
        "node": "m1",
        "labels": {"nvidia.com/mig.config": "all-3g.40gb", "nvidia.com/mig.config.state": "pending"},
    },
    {"do": "pod", "daemonset": "nvidia-mig-manager", "node": "m1", "logs": {"nvidia-mig-manager": LOG}},
)


def _root(report: Report) -> Finding:
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    return root


def test_on_a_node_os_without_systemd_the_host_client_shutdown_is_turned_off() -> None:
    root = _root(diagnosed(_scenario("Talos (v1.10.6)"), *EDITS))
    assert (root.id, root.link, root.node) == ("mig.pending", "mig", "m1")
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    env = root.action.changes["spec"]["migManager"]["env"]
    assert {"name": "WITH_SHUTDOWN_HOST_GPU_CLIENTS", "value": "false"} in env
    assert "delete pod nvidia-mig-manager-" in root.fix


def test_on_a_node_os_with_systemd_the_same_wait_keeps_the_pending_changes_repair() -> None:
    root = _root(diagnosed(_scenario("Ubuntu 22.04.4 LTS"), *EDITS))
    assert root.id == "mig.pending" and "WITH_SHUTDOWN_HOST_GPU_CLIENTS" not in root.fix
