"""GKE's MIG partitioner failing: the MIG link, not the driver, though it runs in the driver installer's pod.

On GKE a node pool created with ``gpu-partition-size`` gets its GPUs partitioned by the ``partition-gpus`` init
container of the driver installer DaemonSet, which runs after the driver step (GoogleCloudPlatform/
container-engine-accelerators nvidia-driver-installer/cos/daemonset-nvidia-mig.yaml@992db812). The partitioner
(partition_gpu/partition_gpu.go) turns MIG mode on and creates the largest count of GPU instances of that size with
nvidia-smi; its table maps each size to a MIG profile, and each GPU generation's sizes were added to it later than
the GPU itself (H200's in 2024-08). So an installer pod stuck in partition-gpus after its driver step completed is a
driver that works and GPUs without a MIG layout: no MIG device exists and the node advertises no GPU. The repair is
the partitioner's image (upstream's manifest pins it by digest, bumped as the table grew) or the pool's size, then
partition-gpus run again.
"""

from __future__ import annotations

from typing import Any

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import Finding, Fix, FixOp, Severity
from gpuchain.doctor.owners import owner_daemonset
from gpuchain.doctor.pods import pod_state
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DRIVER

#: The partitioner's init container and image name (daemonset-nvidia-mig.yaml@992db812).
PARTITIONER = "partition-gpus"
IMAGE = "nvidia-partition-gpu"
#: The partitioner image the upstream manifest pins now, and the digests it pinned before, oldest first (the file's
#: history: 261c6193 2021-01-25, 8c77d289 2021-02-04, aeab99c0 2022-04-08 "Update nvidia-gpu-partition image" (#235:
#: A100 partitioning on cos_containerd nodes), eeb9f98a 2022-08-08, 2b70b6b1 2023-08-08, 6ac7b7ed 2024-11-12;
#: 69d631a2 / db2bc3cc 2024-11 "Update partition-gpus image for H200", #415).
REGISTRY = "gcr.io/gke-release/nvidia-partition-gpu"
CURRENT = "116be6b7335c1d34366223b9a3780fe80d862fcf06cd2c580426fdc1697af693"
SUPERSEDED = (
    "4238017c76b48ef82aa9e59f17469017f311a65945c3cd3aea6a96e0c3e143b4",
    "6317b8b1bbf0c487f220c419a00840e518924fcda1d4485b47486ef21c0891f2",
    "99afc7583991ac3fdb06c5aabb92f619abf19bad84761a57d34719f68c35e7ba",
    "c54fd003948fac687c2a93a55ea6e4d47ffbd641278a9191e75e822fe72471c2",
    "e226275da6c45816959fe43cde907ee9a85c6a2aa8a429418a4cadef8ecdb86a",
    "7c13d18e82dc217aa4eaf5eaa0ebf4c41691ceb896c39f5d88917812ead4131a",
)
MANIFEST = "GoogleCloudPlatform/container-engine-accelerators nvidia-driver-installer/cos/daemonset-nvidia-mig.yaml"
#: The sizes the partitioner's table gives each GKE accelerator (partition_gpu/partition_gpu.go@992db812,
#: partitionSizeToProfileID and its comments), keyed by the node's cloud.google.com/gke-accelerator label.
SIZES = {
    "nvidia-tesla-a100": ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "nvidia-a100-80gb": ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "nvidia-h100-80gb": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "nvidia-h200-141gb": ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    "nvidia-b200": ("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
    "nvidia-gb200": ("1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"),
}
ACCELERATOR = "cloud.google.com/gke-accelerator"
PARTITION_SIZE = "cloud.google.com/gke-gpu-partition-size"
#: The label of an object the GKE addon manager keeps as shipped (a patch of it is reverted).
RECONCILED = "addonmanager.kubernetes.io/mode"
#: The prefix of the partitioner's failures in the catalog (catalog.yaml, GKE's MIG partitioner block).
ENTRIES = "gke-partition-gpus."


def _status(pod: Obj, name: str) -> dict[str, Any]:
    """The init container status of ``name`` ({} when the pod reports none)."""
    return next((s for s in (pod.get("status") or {}).get("initContainerStatuses") or [] if s.get("name") == name), {})


def _exit(state: dict[str, Any]) -> Any:
    """The exit code of a terminated container state (None when it is not terminated)."""
    return (state.get("terminated") or {}).get("exitCode")


def partitioner_failing(pod: Obj | None) -> str:
    """The name of the pod's partitioner init container when it is the one that fails (crash-looping or exited in
    error) and every init container before it completed, else "": the driver step done, the layout not."""
    if pod is None:
        return ""
    inits = ((pod.get("spec") or {}).get("initContainers")) or []
    for i, c in enumerate(inits):
        name = str(c.get("name", ""))
        if name != PARTITIONER and IMAGE not in str(c.get("image", "")):
            continue
        before = [_status(pod, str(b.get("name", ""))) for b in inits[:i]]
        done = all(_exit(s.get("state") or {}) == 0 for s in before)
        status = _status(pod, name)
        state, last = status.get("state") or {}, status.get("lastState") or {}
        waiting = str((state.get("waiting") or {}).get("reason", ""))
        exited = any(_exit(s) not in (None, 0) for s in (state, last))
        return name if done and (waiting == "CrashLoopBackOff" or exited) else ""
    return ""


def _image(obj: Obj, container: str) -> str:
    """The image of init container ``container`` of a pod or of a DaemonSet's template ("" where it has none)."""
    spec = obj.get("spec") or {}
    spec = ((spec.get("template") or {}).get("spec") or {}) if "template" in spec else spec
    return next((str(c.get("image", "")) for c in spec.get("initContainers") or [] if c.get("name") == container), "")


def _digest(image: str) -> str:
    """The sha256 digest an image reference pins ("" for a tag)."""
    return image.rpartition("@sha256:")[2] if "@sha256:" in image else ""


def partition_failed(ctx: Context, view: NodeView) -> Finding | None:
    """The driver installer's partitioner failing on this node after the driver step: the MIG link broken, with the
    repair its line, its image and the pool's size call for (None where the partitioner does not fail)."""
    pod = view.pod(DRIVER)
    container = partitioner_failing(pod)
    if pod is None or not container:
        return None
    ds = owner_daemonset(ctx, pod)
    image = _image(ds, container) or _image(pod, container)
    size, accelerator = view.labels.get(PARTITION_SIZE, ""), view.labels.get(ACCELERATOR, "")
    last = (_status(pod, container).get("lastState") or {}).get("terminated") or {}
    log = ctx.log(pod, container) or str(last.get("message") or "")
    said = catalog.known_error(log, "mig")
    said = said if said is not None and said.entry.id.startswith(ENTRIES) else None
    ns, ds_name = namespace_of(pod) or "kube-system", name_of(ds) or "nvidia-driver-installer"
    rerun = Fix.delete_pod(ns, name_of(pod))
    again = ctx.stack.render(rerun)
    evidence = [
        pod_state(pod).describe(),
        f"init container {container} image {image or '?'}",
        f"node {view.name}: {ACCELERATOR}={accelerator or '?'}, {PARTITION_SIZE}={size or '?'}",
        *(said.evidence(f"{container} log") if said else ()),
    ]
    why = said.entry.cause if said else "it exits in error after the driver step, so no MIG device is created."
    cause = f"GKE's MIG partitioner ({container}, in the driver installer's pod after its driver step) fails: {why}"
    sizes = SIZES.get(accelerator)
    if size and sizes is not None and size in sizes:
        evidence.append(f"{size} is a size of {accelerator} in the partitioner's table now (partition_gpu.go@992db812)")
    action: Fix | None
    if size and sizes is not None and size not in sizes:
        action = None
        cause = (
            f"GKE's MIG partitioner cannot lay out the node pool's gpu-partition-size {size}: it is not a size of "
            f"{accelerator} (its table: {', '.join(sizes)}), so no MIG device exists and the node advertises no GPU."
        )
        fix = (
            f"# recreate the node pool with a size its GPU takes: gcloud container node-pools create ... "
            f"--accelerator type={accelerator},count=<n>,gpu-partition-size=<{'|'.join(sizes)}>; the partitioner "
            "of each new node lays it out"
        )
    elif _digest(image) == CURRENT:
        # The newest partitioner upstream pins: its line names what else to repair.
        action = rerun
        fix = f"# {said.entry.repair(view.name) if said else 'read its log (the line above names the refusal)'}; " + (
            f"then let partition-gpus run again: {again}"
        )
    else:
        old = _digest(image) in SUPERSEDED
        action = Fix(
            FixOp.PATCH_DAEMONSET,
            f"{ns}/{ds_name}",
            {
                "spec": {
                    "template": {
                        "spec": {"initContainers": [{"name": container, "image": f"{REGISTRY}@sha256:{CURRENT}"}]}
                    }
                }
            },
        )
        evidence.append(
            f"{image} is a digest {MANIFEST} pinned before {CURRENT[:12]}: each later partitioner knows more GPUs and "
            "sizes"
            if old
            else f"{image or 'its image'} is not the digest {MANIFEST} pins now ({CURRENT[:12]})"
        )
        managed = bool(((ds.get("metadata") or {}).get("labels") or {}).get(RECONCILED))
        fix = (
            (
                "# the DaemonSet is GKE's own (its addon manager reverts a patch): upgrade the node pool to a newer "
                "GKE version, whose installer carries a newer partitioner; otherwise "
                if managed
                else ""
            )
            + ctx.stack.render(action)
            + f"   # update the partition-gpus image to the nvidia-partition-gpu digest {MANIFEST} pins now; then let "
            f"partition-gpus run again: {again}"
        )
    return node_finding(
        view,
        fid="mig.partition-failed",
        sev=Severity.ERROR,
        link="mig",
        cause=cause,
        evidence=evidence,
        fix=fix,
        action=action,
    )
