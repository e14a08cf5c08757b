"""The held-out harness writes a case's container states as the kubelet does: what it leaves out of a case file is
what the kubelet would have written, so a case reads through the API the way the real cluster it stands for does."""

from __future__ import annotations

import pytest
from sim.heldout import harness

from gpuchain.kube import POD
from gpuchain.kube.errors import BadRequestError
from gpuchain.kube.objects import name_of
from gpuchain.sim import build, parse_scenario

PLUGIN = "nvidia-device-plugin-daemonset"
CONTAINER = "nvidia-device-plugin-ctr"


def _plugin(state: dict, **more: object) -> tuple[dict, str]:
    sim = build(parse_scenario("name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: g}\n"))
    edit = {"do": "pod", "daemonset": PLUGIN, "node": "g", "containers": [{"name": CONTAINER, "state": state, **more}]}
    harness._apply(sim.cluster, {**edit, "logs": {CONTAINER: "the run's last line\n"}})
    pod = next(p for p in sim.cluster.list(POD) if name_of(p).startswith(PLUGIN))
    (status,) = pod["status"]["containerStatuses"]
    return status, sim.cluster.logs(name_of(pod), namespace="kube-system", container=CONTAINER)


def test_a_crash_loop_keeps_the_run_that_ended_and_its_log() -> None:
    """CrashLoopBackOff follows a run that ended (kuberuntime convertToAPIContainerStatuses keeps it as lastState):
    a case that quotes no exit still has one, and `kubectl logs` gives that run's lines."""
    status, log = _plugin({"waiting": "CrashLoopBackOff"}, restarts=5)
    assert status["lastState"] == {"terminated": {"reason": "Error", "exitCode": 1}}
    assert status["started"] is False and status["restartCount"] == 5
    assert log == "the run's last line\n"


def test_a_quoted_last_run_is_kept_as_written() -> None:
    status, _ = _plugin({"waiting": "CrashLoopBackOff"}, restarts=2, last={"terminated": "StartError", "exitCode": 128})
    assert status["lastState"] == {"terminated": {"reason": "StartError", "exitCode": 128}}


def test_a_container_that_never_ran_has_no_log() -> None:
    with pytest.raises(BadRequestError, match="is waiting to start: ContainerCreating"):
        _plugin({"waiting": "ContainerCreating"})


def test_a_running_container_is_started() -> None:
    status, log = _plugin({})
    assert status["started"] is True and "lastState" not in status and log == "the run's last line\n"


def test_a_pod_refused_at_admission_keeps_the_refusal_in_its_status() -> None:
    """rejectPod records the Event and sets the pod Failed with the same reason and message together (kubernetes
    pkg/kubelet/kubelet.go@v1.37.2): a case that writes the Event has the status beside it."""
    said = "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices nvidia.com/gpu"
    sim = build(parse_scenario("name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: g}\n"))
    harness._apply(sim.cluster, {"do": "node", "node": "g", "nodeInfo": {"kubeletVersion": "v1.30.4"}})
    edit = {
        "do": "pod",
        "daemonset": PLUGIN,
        "node": "g",
        "phase": "Failed",
        "events": [{"reason": "UnexpectedAdmissionError", "message": said}],
    }
    harness._apply(sim.cluster, edit)
    harness.as_the_kubelet_writes(sim.cluster)
    pod = next(p for p in sim.cluster.list(POD) if name_of(p).startswith(PLUGIN))
    assert (pod["status"]["reason"], pod["status"]["message"]) == (
        "UnexpectedAdmissionError",
        f"Pod was rejected: {said}",
    )
