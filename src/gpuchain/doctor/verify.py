"""``gpuchain verify``: the production checklist for a GPU cluster, each item pass/fail with its evidence.

| item | the acceptance command run by hand | passes when |
|---|---|---|
| driver-version | nvidia-smi on the node | every node's driver supports the CUDA image's version |
| toolkit | docker run --gpus all ... nvidia-smi | every GPU node's toolkit is ready and validated |
| device-plugin-count | kubectl describe node | nvidia.com/gpu equals the physical GPU count |
| test-pod | kubectl logs gpu-test | a pod with nvidia.com/gpu: 1 ran nvidia-smi |
| metrics | Prometheus scrape | every GPU node has a ready exporter pod (readiness only: not scraped) |
| mig-resources | kubectl describe node | nodes with MIG on advertise nvidia.com/mig-* names |

The checks are pure over the doctor's snapshot; the test pod is a callable supplied by the
shell (the simulator's kubelet peer, or a real pod on a live cluster).
"""

from __future__ import annotations

import contextlib
import enum
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuchain.common.labels import MIG_CONFIG, MIG_CONFIG_STATE
from gpuchain.doctor.context import Context, index
from gpuchain.doctor.links.common import GPU_COUNT
from gpuchain.doctor.pods import init_done, pod_state
from gpuchain.doctor.snapshot import LogReader
from gpuchain.doctor.structs import Snapshot
from gpuchain.kube import POD, Cluster, KubeError, NotFoundError
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.operator.operands import DCGM_EXPORTER, TOOLKIT, VALIDATOR

DEFAULT_CUDA_IMAGE = "nvcr.io/nvidia/cuda:12.6.0-base-ubuntu22.04"
CUDA_MAJOR = "nvidia.com/cuda.runtime-version.major"
CUDA_MINOR = "nvidia.com/cuda.runtime-version.minor"
DRIVER_FULL = "nvidia.com/cuda.driver-version.full"


class Status(enum.StrEnum):
    """An item's verdict."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True, kw_only=True)
class Item:
    """One checklist line."""

    id: str
    title: str
    status: Status
    evidence: tuple[str, ...]
    command: str  #: what an operator runs by hand to check the same thing

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status.value,
            "evidence": list(self.evidence),
            "command": self.command,
        }


class PodOutcome(Protocol):
    """What happened to the gpu-test pod, wherever it ran (live cluster or simulator)."""

    @property
    def ok(self) -> bool: ...
    @property
    def node(self) -> str | None: ...
    @property
    def output(self) -> str: ...
    @property
    def reason(self) -> str: ...


@dataclass(frozen=True, kw_only=True)
class GpuTestOutcome:
    """The gpu-test pod on a live cluster: where it ran and what nvidia-smi printed."""

    ok: bool
    node: str | None
    output: str
    reason: str = ""


@dataclass
class Checklist:
    """Every item; ``passed`` is False as soon as one fails."""

    items: list[Item] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No item failed (skipped items do not fail the checklist)."""
        return all(i.status is not Status.FAIL for i in self.items)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"passed": self.passed, "items": [i.to_dict() for i in self.items]}


def cuda_of_image(image: str) -> tuple[int, int] | None:
    """CUDA version of an image from its tag (``cuda:12.6.0-base-ubuntu22.04`` -> (12, 6))."""
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    m = re.match(r"^(\d+)\.(\d+)", tag)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _nodes(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" (+{len(names) - 6} more)" if len(names) > 6 else "")


def driver_version(ctx: Context, image: str) -> Item:
    """Every GPU node's driver supports at least the CUDA version of the image workloads use."""
    cmd = "nvidia-smi   # on each node: 'CUDA Version' >= the image's"
    need = cuda_of_image(image)
    if need is None:
        return Item(
            id="driver-version",
            title="driver version vs CUDA image",
            status=Status.SKIP,
            evidence=(f"no CUDA version in {image!r}",),
            command=cmd,
        )
    bad, unknown, seen = [], [], set()
    for v in ctx.views:
        major, minor = v.labels.get(CUDA_MAJOR, ""), v.labels.get(CUDA_MINOR, "")
        if not (major.isdigit() and minor.isdigit()):
            unknown.append(v.name)
            continue
        seen.add(f"{v.labels.get(DRIVER_FULL, '?')} (CUDA {major}.{minor})")
        if (int(major), int(minor)) < need:
            bad.append(f"{v.name} (CUDA {major}.{minor})")
    evidence = [
        f"image {image} needs CUDA >= {need[0]}.{need[1]}",
        f"drivers seen: {', '.join(sorted(seen)) or 'none'}",
    ]
    if bad:
        evidence.append(f"too old: {_nodes(bad)}")
    if unknown:
        evidence.append(f"no driver answers (no {CUDA_MAJOR} label): {_nodes(unknown)}")
    ok = not bad and not unknown and bool(ctx.views)
    return Item(
        id="driver-version",
        title="driver version vs CUDA image",
        status=Status.PASS if ok else Status.FAIL,
        evidence=tuple(evidence),
        command=cmd,
    )


def toolkit(ctx: Context) -> Item:
    """Every GPU node's toolkit is ready and the validator's toolkit check passed."""
    cmd = "docker run --rm --gpus all nvidia/cuda:12.6.0-base nvidia-smi   # or the validator's toolkit-validation"
    bad = []
    for v in ctx.views:
        pod, val = v.pod(TOOLKIT), v.pod(VALIDATOR)
        ready = pod is not None and pod_state(pod).ready
        if not (ready and (val is None or init_done(val, "toolkit-validation"))):
            bad.append(f"{v.name} ({pod_state(pod).status if pod else 'no toolkit pod'})")
    ok = not bad and bool(ctx.views)
    evidence = [f"{len(ctx.views) - len(bad)}/{len(ctx.views)} GPU nodes: toolkit ready and toolkit-ready validated"]
    if bad:
        evidence.append(f"not ready: {_nodes(bad)}")
    return Item(
        id="toolkit",
        title="container toolkit",
        status=Status.PASS if ok else Status.FAIL,
        evidence=tuple(evidence),
        command=cmd,
    )


def device_plugin_count(ctx: Context) -> Item:
    """nvidia.com/gpu (capacity and allocatable) equals the physical GPU count on non-MIG nodes."""
    cmd = "kubectl describe node <node> | grep nvidia.com/gpu"
    bad, checked = [], 0
    for v in ctx.views:
        if v.labels.get(MIG_CONFIG, "all-disabled") != "all-disabled":
            continue
        physical = v.labels.get(GPU_COUNT, "")
        cap = node_gpu_resources(v.node).get("nvidia.com/gpu", 0)
        alloc = node_gpu_resources(v.node, "allocatable").get("nvidia.com/gpu", 0)
        checked += 1
        if not physical.isdigit() or not (cap == alloc == int(physical)):
            bad.append(f"{v.name} (capacity {cap}, allocatable {alloc}, physical {physical or '?'})")
    if not checked:
        return Item(
            id="device-plugin-count",
            title="device plugin count = physical",
            status=Status.SKIP,
            evidence=("no non-MIG GPU node",),
            command=cmd,
        )
    evidence = [f"{checked - len(bad)}/{checked} nodes: nvidia.com/gpu = physical GPU count"]
    if bad:
        evidence.append(f"mismatch: {_nodes(bad)}")
    return Item(
        id="device-plugin-count",
        title="device plugin count = physical",
        status=Status.FAIL if bad else Status.PASS,
        evidence=tuple(evidence),
        command=cmd,
    )


def test_pod(outcome: PodOutcome | None) -> Item:
    """The gpu-test pod ran nvidia-smi."""
    cmd = "kubectl apply -f gpu-test.yaml && kubectl logs gpu-test"
    if outcome is None:
        return Item(
            id="test-pod",
            title="test pod runs nvidia-smi",
            status=Status.SKIP,
            evidence=("skipped (--no-test-pod)",),
            command=cmd,
        )
    lines = [f"ran on {outcome.node}" if outcome.node else "not scheduled"]
    if outcome.reason:
        lines.append(outcome.reason)
    lines += [f"| {line}" for line in outcome.output.splitlines()[:4]]
    return Item(
        id="test-pod",
        title="test pod runs nvidia-smi",
        status=Status.PASS if outcome.ok else Status.FAIL,
        evidence=tuple(lines),
        command=cmd,
    )


def metrics(ctx: Context) -> Item:
    """Every GPU node has a ready exporter. The metrics themselves are not scraped: the Cluster
    port has no pod proxy, so the item says so and hands over the command that does scrape."""
    ready, bad = [], []
    for v in ctx.views:
        pod = v.pod(DCGM_EXPORTER)
        if pod is not None and pod_state(pod).ready:
            ready.append(str((pod.get("metadata") or {}).get("name")))
        else:
            bad.append(v.name)
    target = f"pod/{ready[0]}" if ready else "pod/<dcgm-exporter pod>"
    cmd = (
        f"kubectl -n {ctx.namespace} port-forward {target} 9400:9400 & "
        "sleep 1; curl -s localhost:9400/metrics | grep DCGM_FI_"
    )
    ok = not bad and bool(ctx.views)
    evidence = [
        f"{len(ready)}/{len(ctx.views)} GPU nodes with a ready dcgm-exporter pod",
        "metrics not scraped (readiness only): run the command below to see DCGM_FI_* series",
    ]
    if bad:
        evidence.append(f"no ready exporter on: {_nodes(bad)}")
    return Item(
        id="metrics",
        title="exporter ready",
        status=Status.PASS if ok else Status.FAIL,
        evidence=tuple(evidence),
        command=cmd,
    )


def mig_resources(ctx: Context) -> Item:
    """Nodes with a MIG layout applied advertise MIG resource names."""
    cmd = "kubectl describe node <node> | grep nvidia.com/mig-"
    mig_nodes = [v for v in ctx.views if v.labels.get(MIG_CONFIG, "all-disabled") != "all-disabled"]
    if not mig_nodes:
        return Item(
            id="mig-resources",
            title="MIG resource names",
            status=Status.SKIP,
            evidence=("no node asks for a MIG layout",),
            command=cmd,
        )
    bad, names = [], set()
    for v in mig_nodes:
        cap = node_gpu_resources(v.node)
        mig = sorted(k for k in cap if k.startswith("nvidia.com/mig-"))
        single = "-MIG-" in v.labels.get("nvidia.com/gpu.product", "") and cap.get("nvidia.com/gpu", 0) > 0
        names.update(mig or (["nvidia.com/gpu (single strategy)"] if single else []))
        if not mig and not single:
            bad.append(
                f"{v.name} ({MIG_CONFIG}={v.labels.get(MIG_CONFIG)}, state {v.labels.get(MIG_CONFIG_STATE, '?')})"
            )
    evidence = [f"resource names: {', '.join(sorted(names)) or 'none'}"]
    if bad:
        evidence.append(f"no MIG resources: {_nodes(bad)}")
    return Item(
        id="mig-resources",
        title="MIG resource names",
        status=Status.FAIL if bad else Status.PASS,
        evidence=tuple(evidence),
        command=cmd,
    )


def checklist(snapshot: Snapshot, *, cuda_image: str = DEFAULT_CUDA_IMAGE, pod: PodOutcome | None = None) -> Checklist:
    """The whole checklist over one snapshot and the test pod's outcome."""
    ctx = index(snapshot)
    return Checklist(
        [
            driver_version(ctx, cuda_image),
            toolkit(ctx),
            device_plugin_count(ctx),
            test_pod(pod),
            metrics(ctx),
            mig_resources(ctx),
        ]
    )


def gpu_test_pod(
    image: str = DEFAULT_CUDA_IMAGE, *, namespace: str = "default", name: str = "gpu-test"
) -> dict[str, Any]:
    """The classic gpu-test pod: nvidia-smi with one nvidia.com/gpu."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "gpuchain-verify"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "cuda",
                    "image": image,
                    "command": ["nvidia-smi"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def live_test_pod(
    cluster: Cluster,
    *,
    reader: LogReader | None,
    image: str = DEFAULT_CUDA_IMAGE,
    namespace: str = "default",
    timeout: float = 120.0,
    poll: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> GpuTestOutcome:
    """Create gpu-test, wait for it to finish, read its log, delete it (always)."""
    pod = gpu_test_pod(image, namespace=namespace)
    name = pod["metadata"]["name"]
    try:
        cluster.create(pod)
    except KubeError as exc:
        return GpuTestOutcome(ok=False, node=None, output="", reason=f"cannot create pod {namespace}/{name}: {exc}")
    try:
        deadline = time.monotonic() + timeout
        current = pod
        while time.monotonic() < deadline:
            current = cluster.get(POD, name=name, namespace=namespace)
            phase = (current.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                break
            sleep(poll)
        status = current.get("status") or {}
        node = (current.get("spec") or {}).get("nodeName")
        phase = status.get("phase", "Pending")
        output = (reader(namespace, name, "cuda") if reader is not None else None) or ""
        reason = "" if phase == "Succeeded" else f"pod phase {phase} after {timeout:.0f} s"
        for cond in status.get("conditions") or []:
            if cond.get("reason") == "Unschedulable":
                reason = f"{reason}: {cond.get('message')}"
        return GpuTestOutcome(ok=phase == "Succeeded", node=node, output=output, reason=reason)
    finally:
        with contextlib.suppress(NotFoundError):
            cluster.delete(POD, name=name, namespace=namespace)
