"""The inputs of ``gpuchain plan stack`` read from a cluster, through the doctor's stack detection.

The doctor already recognises the stack (`gpuchain.doctor.stacks`) and which nodes have GPUs;
this module turns its `Snapshot` into a `Reading`: how many GPU nodes, who owns the driver, which
GPU models and driver versions they carry (heterogeneity) and where MIG is in use, each with the
evidence it came from. Who owns the driver follows from where it runs: a driver container that an
operator deploys is the team's (it picks the version), GKE's driver installer and a host driver
on cloud nodes come with the provider's image, a host driver on nodes of no cloud is the team's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from gpuchain.doctor.links.common import DRIVER_VERSION
from gpuchain.doctor.snapshot import PRODUCT, mig_in_use
from gpuchain.doctor.stacks import detect
from gpuchain.doctor.stacks.base import is_gpu_node, provider_of
from gpuchain.doctor.structs import Snapshot
from gpuchain.kube.objects import Obj, labels_of, name_of
from gpuchain.planner.stack import DriverOwner, Reading

#: Cloud labels that name a node's GPU model where feature discovery does not run.
ACCELERATOR_LABELS = ("cloud.google.com/gke-accelerator", "k8s.amazonaws.com/accelerator")
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
CLOUDS = {"eks": "aws://", "aks": "azure://", "gke": "gce://"}


def read_snapshot(snapshot: Snapshot, where: str) -> Reading:
    """What ``snapshot`` says about nodes, driver owner, heterogeneity and MIG (``where`` names the source)."""
    stack = detect(snapshot)
    gpu = sorted((n for n in snapshot.nodes if is_gpu_node(n)), key=name_of)
    driver, driver_why = _driver_owner(snapshot, gpu)
    models, models_why = _distinct(gpu, _model, "GPU models")
    versions, versions_why = _distinct(gpu, lambda n: labels_of(n).get(DRIVER_VERSION) or None, DRIVER_VERSION)
    mig = [(name_of(n), why) for n in gpu if (why := mig_in_use(n))]
    return Reading(
        where=where,
        stack=stack.title,
        nodes=len(gpu),
        nodes_evidence=f"{len(gpu)} of {len(snapshot.nodes)} nodes have NVIDIA GPUs (labels or capacity)",
        driver=driver,
        driver_evidence=driver_why,
        gpu_models=models,
        gpu_models_evidence=models_why,
        driver_versions=versions,
        driver_versions_evidence=versions_why,
        mig_nodes=tuple(n for n, _ in mig),
        mig_evidence="MIG in use on "
        + ", ".join(f"{n} ({why})" for n, why in mig[:3])
        + (" ..." if len(mig) > 3 else ""),
    )


def _driver_owner(snapshot: Snapshot, gpu: list[Obj]) -> tuple[DriverOwner, str]:
    stack = detect(snapshot)
    provider = provider_of(gpu or snapshot.nodes)
    container = not stack.host_driver and stack.policy.driver.enabled
    if container and stack.id == "gke":
        return DriverOwner.CLOUD_IMAGE, f"GKE's {stack.ds('driver')} DaemonSet installs Google's driver build"
    if container:
        return (
            DriverOwner.SELF_MANAGED,
            f"{stack.title} runs the driver in a container (DaemonSet {stack.ds('driver')}): "
            "your team picks the version",
        )
    if provider in CLOUDS:
        return (
            DriverOwner.CLOUD_IMAGE,
            f"host driver on {provider} nodes (providerID {CLOUDS[provider]}...): the provider's node image carries it",
        )
    return (
        DriverOwner.SELF_MANAGED,
        "host driver on nodes of no managed cloud (no aws://, azure:// or gce:// providerID): your team installs it",
    )


def _model(node: Obj) -> str | None:
    labels = labels_of(node)
    product = labels.get(PRODUCT)
    if product:
        return product.split("-MIG-")[0].removesuffix("-SHARED")
    return next((labels[k] for k in ACCELERATOR_LABELS if labels.get(k)), None) or (
        f"instance type {labels[INSTANCE_TYPE]}" if labels.get(INSTANCE_TYPE) else None
    )


def _distinct(gpu: list[Obj], key: Callable[[Obj], str | None], what: str) -> tuple[tuple[str, ...], str]:
    """The distinct values ``key`` gives over the GPU nodes, with "X on N nodes" evidence; () when none."""
    seen = Counter(v for n in gpu if (v := key(n)))
    if not seen:
        return (), ""
    known = sum(seen.values())
    parts = ", ".join(f"{v} on {c} node(s)" for v, c in sorted(seen.items()))
    unread = f"; {len(gpu) - known} node(s) do not say" if known < len(gpu) else ""
    return tuple(sorted(seen)), f"{what}: {parts}{unread}"
