"""GFD's feature file written but never read: the labels GFD found never reach the node, whatever a new pod finds.

In its default output mode before k8s-device-plugin v0.19.0, GPU feature discovery writes its labels as a feature file
into Node Feature Discovery's features.d directory on the host, and nfd-worker turns that file into node labels; GFD
logs "Writing labels to output file %v" each time it writes it (NVIDIA/k8s-device-plugin internal/lm/output.go@v0.17.1,
the file output only). Where GFD says so, runs, and the node, labelled by NFD, still has no nvidia.com/gpu.* label,
GFD did its part and the file is not read: the host keeps the reader from it (SELinux enforcing, the GPU Operator's
known issue on RKE2 with RHEL 9.6, NVIDIA/cloud-native-docs gpu-operator/release-notes.rst, v25.10.1) or nfd-worker
reads another directory. A new GFD pod writes the same file to the same end; what repairs is the other output mode,
the NodeFeature API (GFD's use-node-feature-api flag, env USE_NODE_FEATURE_API, NVIDIA/k8s-device-plugin
cmd/gpu-feature-discovery/main.go@v0.17.1), which hands the labels to nfd-master through the API server instead.
"""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.gfd_nodefeature import Refused
from gpuchain.doctor.links.toolkit import NO_NVML
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.siblings import read_sibling
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import GFD

#: GFD's own line for each write of its feature file (the file output mode only).
WROTE_FILE = "Writing labels to output file "
#: The variable that switches GFD to the NodeFeature API (its flag's EnvVars).
API_ENV = "USE_NODE_FEATURE_API"
#: The GPU Operator release from which its GFD Role may create NodeFeature objects (releases.yaml,
#: k8s-device-plugin.gfd-feature-file-selinux).
ROLE_FROM = "v25.10.0"


def _file_written(ctx: Context, pod: Obj) -> tuple[str, str, Obj]:
    """The path GFD's log says it wrote its feature file to, and whose log says so: its own, else that of a sibling
    from the same template on a node built alike where its own was not read, and that pod (("", "", pod) where none
    says it)."""
    names = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or []]
    sibling = read_sibling(ctx, pod, names)
    said, where = (sibling.pod, f"pod {name_of(sibling.pod)} on {sibling.node}") if sibling else (pod, "")
    for name in names:
        for line in ctx.log(said, name).splitlines():
            at = line.find(WROTE_FILE)
            if at >= 0:
                return line[at + len(WROTE_FILE) :].strip(), where, said
    return "", "", pod


def _without_gpus(ctx: Context, pod: Obj) -> bool:
    """Does GFD's own log say it found no NVML (the file it wrote then holds no GPU label, and a new pod that finds
    the driver is the repair)?"""
    names = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or []]
    return any(catalog.find(ctx.log(pod, name), *NO_NVML) is not None for name in names)


def feature_file_unread(ctx: Context, view: NodeView) -> Refused | None:
    """GFD on this node writing its feature file, with the node still unlabelled: the NodeFeature API output as the
    repair (None where GFD's log does not say it wrote the file)."""
    pod = view.pod(GFD)
    path, where, said = _file_written(ctx, pod) if pod is not None else ("", "", {})
    if pod is None or not path or _without_gpus(ctx, said):
        return None
    on = {"name": API_ENV, "value": "true"}
    cause = (
        f"GFD writes its labels as a feature file ({path}) for Node Feature Discovery's worker to read, and its log "
        "says it wrote it, yet the node has none of them: the file is not read (on an SELinux-enforcing host, such "
        "as RKE2 on RHEL 9, the host keeps the reader from that directory; or nfd-worker reads another one), and a "
        "new GFD pod writes the same file to the same end."
    )
    evidence = (
        f"GFD log{f' ({where}, same template, node alike)' if where else ''}: {WROTE_FILE}{path}",
        "source: NVIDIA/k8s-device-plugin internal/lm/output.go@v0.17.1",
    )
    if ctx.policy_obj is not None:
        env = ((ctx.policy_obj.get("spec") or {}).get("gfd") or {}).get("env") or []
        kept = [e for e in env if e.get("name") != API_ENV]
        action = Fix(
            FixOp.PATCH_POLICY,
            ctx.policy_name,
            {"spec": {"gfd": {"env": [*kept, on]}}, NOT_SIMULATED: "NFD's reading of GFD's labels is not simulated"},
        )
        fix = ctx.stack.render(action) + (
            "   # GFD hands its labels to nfd-master through the NodeFeature API instead of the file (GPU Operator "
            f"from {ROLE_FROM}, whose GFD Role may create NodeFeature objects; the default from GFD v0.19.0)"
        )
        return Refused(cause=cause, evidence=evidence, fix=fix, action=action)
    ds = owner_ds(pod)
    fix = (
        f"kubectl -n {namespace_of(pod) or ctx.namespace} set env daemonset/{ds} {API_ENV}=true   # GFD hands its "
        "labels to nfd-master through the NodeFeature API instead of the file; its ServiceAccount needs create, get "
        "and update on nodefeatures.nfd.k8s-sigs.io"
    )
    return Refused(cause=cause, evidence=evidence, fix=fix, action=None)
