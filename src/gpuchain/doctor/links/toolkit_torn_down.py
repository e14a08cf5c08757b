"""A toolkit container stopped by a signal right after it configured the runtime, again and again.

The toolkit container's run is setup, then a wait: it writes the nvidia runtime into containerd's config, signals
containerd to load it ("Completed 'setup' for containerd"), and waits for a signal to undo it ("Waiting for
signal"); a signal before or during that wait ends the run ("Signal received, exiting early", or its cleanup
reverting the config) (NVIDIA/nvidia-container-toolkit tools/container/nvidia-toolkit/run.go and
tools/container/containerd/containerd.go@v1.11.0). A run that completed its setup and then ended on a signal did not
fail at its work: something stopped it, and the errors its cleanup logs afterwards (containerd's socket refusing while
it restarts) are consequences, not the cause. Where that repeats, and the cluster runs a GPU Operator release whose
notes name exactly that (releases.yaml, symptom torn-down: releases before v22.9.1 with containerd 1.6.9 and later),
the repair is that release; on MicroK8s it is the gpu addon's GPU Operator version, as the addon installs the
operator with its own Helm (canonical/microk8s-core-addons addons/nvidia/enable: ``--gpu-operator-version``, the
gpu addon's ``--version`` before it). One restart after the setup is expected and is no fault.
"""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.releases import operator_repair
from gpuchain.doctor.model import LinkState, Severity
from gpuchain.doctor.node import node_info
from gpuchain.doctor.pods import PodState
from gpuchain.doctor.releases import showing
from gpuchain.kube.objects import labels_of

#: The toolkit's words for a setup it completed, for the wait after it, and for a signal that ended the run, with its
#: cleanup (run.go and containerd.go@v1.11.0: "Completed 'setup' for %v", "Waiting for signal", "Signal received,
#: exiting early", "Cleaning up Runtime", "Starting 'cleanup' for %v").
SET_UP = "Completed 'setup' for containerd"
STOPPED = ("Signal received", "Cleaning up Runtime", "Starting 'cleanup' for")
#: Restarts from which a toolkit stopped after its setup is stopped again and again, not once (the restart its own
#: runtime restart may cost it on a distribution that restarts containerd for a new config).
AGAIN = 3
#: The label MicroK8s puts on its nodes (canonical/microk8s: microk8s.io/cluster=true).
MICROK8S = "microk8s.io/cluster"


def stopped_after_setup(log: str) -> str:
    """The line that ended a toolkit run which had completed its setup ("" where the log shows no such run)."""
    lines = log.splitlines()
    done = next((i for i, line in enumerate(lines) if SET_UP in line), None)
    if done is None:
        return ""
    return next((line for line in lines[done + 1 :] if any(s in line for s in STOPPED)), "")


def _microk8s_move(version: str) -> str:
    """How MicroK8s moves its gpu addon's GPU Operator to ``version``."""
    return (
        f"microk8s disable gpu && microk8s enable gpu --version {version}   # MicroK8s's gpu addon installs the GPU "
        f"Operator release --version names (newer addons: microk8s enable nvidia --gpu-operator-version {version})"
    )


def torn_down(ctx: Context, *, view: NodeView, state: PodState, log: str) -> Result | None:
    """The toolkit pod stopped by a signal after completing its setup, AGAIN times or more, under a GPU Operator
    release and container runtime whose release notes name that defect: the release that fixed it. None otherwise
    (the pod's own state and log say the rest)."""
    ended = stopped_after_setup(log) if state.restarts >= AGAIN else ""
    if not ended:
        return None
    runtime = node_info(view.node).get("containerRuntimeVersion", "")
    shown = tuple(d for d in showing("torn-down") if d.runs_under(runtime))
    known = operator_repair(ctx, shown=shown) if shown else None
    if known is None:
        return None
    hit = shown[0]
    fix = known.fix
    if labels_of(view.node).get(MICROK8S) == "true":
        fix = f"{_microk8s_move(hit.fixed_in)}; or: {fix}"
    return Result(
        LinkState.BROKEN,
        "toolkit stopped after configuring containerd",
        (
            node_finding(
                view,
                fid="toolkit.torn-down",
                sev=Severity.ERROR,
                link="toolkit",
                cause=f"the toolkit pod completes its setup (it writes the nvidia runtime and signals containerd) and "
                f"is then stopped by a signal, {state.restarts} times; the errors after that are its cleanup's. "
                f"{known.cause}",
                evidence=[
                    state.describe(),
                    f"toolkit log: {SET_UP}",
                    f"toolkit log: {ended.strip()}",
                    f"container runtime {runtime}",
                    *known.evidence,
                ],
                fix=fix,
                action=known.action,
            ),
        ),
    )
