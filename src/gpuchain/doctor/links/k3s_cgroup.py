"""Pods of the nvidia runtime killed seconds after they start on k3s and RKE2 releases that give that runtime no
cgroup driver.

k3s (and RKE2, which runs its agent) writes its containerd's config itself, and adds the nvidia runtime it finds on
the node with only its BinaryName; runc there runs with SystemdCgroup = true where the node uses systemd's cgroup
driver. Newer NVIDIA container toolkits need the nvidia runtime on the same cgroup driver: without it its
containers land in the wrong cgroup and are killed a few seconds after they start, again and again
(k3s-io/k3s#7130). k3s-io/k3s#8470 passes SystemdCgroup through to the nvidia runtime's options, from k3s' October
2023 patch releases (v1.27.7+k3s1 on its 1.27 line, k3s-io/k3s#8770). The node's containerRuntimeVersion names the
containerd k3s built ("-k3s" suffixed); gpuchain takes one before 1.7.7-k3s1 (the k3s-io/containerd tag of that
time) for a release without the fix: an assumption from the fork's tags, not a release table. The kubelet's view
of it: the pod's sandbox dies under it (SandboxChanged, "Pod sandbox changed, it will be killed and re-created.")
and its containers end with exit code 137.
"""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.toolkit import check_toolkit
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.node import distribution_of, node_info, runtime_version
from gpuchain.doctor.owners import owner_ds
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: The kubelet's Event reason when a running pod's sandbox died (pkg/kubelet/kuberuntime kuberuntime_manager.go).
SANDBOX_CHANGED = "SandboxChanged"
#: The first containerd k3s ships with k3s-io/k3s#8470 (its October 2023 releases).
FIXED_CONTAINERD = (1, 7, 7)
#: Restarts after which a killed pod is killed again and again, not once.
KILLED_AGAIN = 3


def _nvidia_runtime(ctx: Context, pod: Obj) -> bool:
    """Whether ``pod`` runs with runtimeClassName nvidia (its spec, or its DaemonSet's template)."""
    if (pod.get("spec") or {}).get("runtimeClassName") == "nvidia":
        return True
    ds = owner_ds(pod)
    for d in ctx.snapshot.daemonsets if ds else ():
        if name_of(d) == ds and namespace_of(d) == namespace_of(pod):
            template = ((d.get("spec") or {}).get("template") or {}).get("spec") or {}
            return template.get("runtimeClassName") == "nvidia"
    return False


def _killed(view: NodeView, pod: Obj) -> bool:
    """Whether ``pod``'s containers end killed (137) again and again as its sandbox is re-created."""
    changed = any(
        e.get("reason") == SANDBOX_CHANGED and (e.get("involvedObject") or {}).get("name") == name_of(pod)
        for e in view.events
    )
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return changed and any(
        ((cs.get("lastState") or {}).get("terminated") or {}).get("exitCode") == 137
        and int(cs.get("restartCount") or 0) >= KILLED_AGAIN
        for cs in statuses
    )


def check_toolkit_and_cgroup(ctx: Context, view: NodeView) -> Result:
    """The toolkit link's check, then nvidia-runtime pods killed on a k3s/RKE2 containerd without k3s-io/k3s#8470."""
    result = check_toolkit(ctx, view)
    scheme = node_info(view.node).get("containerRuntimeVersion", "")
    version = runtime_version(view.node)
    if result.state is LinkState.BROKEN or "-k3s" not in scheme or version is None or version >= FIXED_CONTAINERD:
        return result
    killed = [p for p in [*view.pods, *view.workloads] if _nvidia_runtime(ctx, p) and _killed(view, p)]
    if not killed:
        return result
    dist = distribution_of(view.node)
    template = f"{dist.containerd_config}.tmpl"
    action = (
        "move the node to a k3s (or RKE2) release with k3s-io/k3s#8470, which passes SystemdCgroup through to the "
        "nvidia runtime's options (k3s' October 2023 patch releases on, e.g. v1.27.7+k3s1); until then give the nvidia "
        f'runtime SystemdCgroup = true in its options in {template} (its [plugins."io.containerd.grpc.v1.cri".'
        f"containerd.runtimes.nvidia.options]), then {dist.restart}"
    )
    fix = Fix(FixOp.NODE, view.name, {"action": action, NOT_SIMULATED: "the runtime's cgroup driver is no fact"})
    finding = node_finding(
        view,
        fid="toolkit.runtime-cgroup-driver",
        sev=Severity.ERROR,
        link="toolkit",
        cause="the nvidia runtime in this node's k3s containerd config has no SystemdCgroup, unlike runc: the pods it "
        "runs land outside the cgroups the kubelet manages and are killed seconds after they start, again and again.",
        evidence=[
            f"containerRuntimeVersion {scheme}: a k3s containerd before {'.'.join(map(str, FIXED_CONTAINERD))}-k3s1",
            *(
                f"pod {namespace_of(p)}/{name_of(p)} (runtimeClassName nvidia): {SANDBOX_CHANGED}, exit 137"
                for p in killed[:3]
            ),
        ],
        fix=ctx.stack.render(fix),
        action=fix,
    )
    return Result(LinkState.BROKEN, "nvidia runtime without the systemd cgroup driver", (finding,))
