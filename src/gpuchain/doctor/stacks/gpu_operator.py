"""NVIDIA's GPU Operator: a ``nvidia.com/v1`` ClusterPolicy (and optionally ``NVIDIADriver``
objects), operands in its namespace (``gpu-operator`` by default) under NVIDIA's names.

Names as NVIDIA/gpu-operator's ``assets/`` render them (commit a22dbf6): DaemonSets
nvidia-driver-daemonset (container nvidia-driver-ctr), nvidia-container-toolkit-daemonset
(nvidia-container-toolkit-ctr), nvidia-device-plugin-daemonset (nvidia-device-plugin),
nvidia-operator-validator, gpu-feature-discovery, nvidia-dcgm-exporter, nvidia-mig-manager.
With the NVIDIADriver CRD the driver DaemonSets are ``nvidia-gpu-driver-<os>-<hash>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from gpuchain.doctor.operator_says import runs_operator
from gpuchain.doctor.stacks.base import daemonsets_in
from gpuchain.doctor.stacks.inferred_policy import infer_policy
from gpuchain.doctor.structs import CHARTS, Snapshot, Stack
from gpuchain.kube.objects import Obj, name_of
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy
from gpuchain.operator.reconcile import active_policy

POLICY_GROUP = "nvidia.com"
POLICY_RESOURCE = f"clusterpolicies.{POLICY_GROUP}"
DEFAULT_NAMESPACE = "gpu-operator"
DAEMONSETS = {
    "driver": "nvidia-driver-daemonset",
    "container-toolkit": "nvidia-container-toolkit-daemonset",
    "operator-validation": "nvidia-operator-validator",
    "device-plugin": "nvidia-device-plugin-daemonset",
    "dcgm-exporter": "nvidia-dcgm-exporter",
    "gpu-feature-discovery": "gpu-feature-discovery",
    "mig-manager": "nvidia-mig-manager",
}
OPERAND_NAMES = frozenset(DAEMONSETS.values())
#: The operand DaemonSets no other stack names so: the operator's driver and toolkit.
RENDERED_ONLY = frozenset({DAEMONSETS["driver"], DAEMONSETS["container-toolkit"]})
CONTAINERS = {
    "driver": "nvidia-driver-ctr",
    "container-toolkit": "nvidia-container-toolkit-ctr",
    "operator-validation": "nvidia-operator-validator",
    "device-plugin": "nvidia-device-plugin",
    "dcgm-exporter": "nvidia-dcgm-exporter",
    "gpu-feature-discovery": "gpu-feature-discovery",
    "mig-manager": "nvidia-mig-manager",
}
#: The OS families NVIDIA publishes driver images for: the image tag is ``<version>-<os><os version>``
#: (NVIDIA/gpu-driver-container Makefile@25.01.21: ``IMAGE_TAG = $(IMAGE_VERSION)-$(DIST)``,
#: ``DISTRIBUTIONS := ubuntu18.04 ubuntu20.04 ubuntu22.04 ubuntu24.04 ... rhel8 rhel9 flatcar fedora36
#: sles15.3 precompiled_rhcos``; Makefile@06a208c adds rocky8 rocky9 rocky10, and NVIDIA/cloud-native-docs
#: gpu-operator/platform-support.rst@52dcb7b8 lists Rocky Linux 8.10, 9.7, 10.1). A node on any other OS has no
#: driver image at any version.
DRIVER_IMAGE_OS = ("ubuntu", "rhel", "rhcos", "rocky", "flatcar", "fedora", "sles")
#: NVIDIADriver-managed driver DaemonSets.
DRIVER_PREFIX = "nvidia-gpu-driver-"
#: Driver DaemonSets the operator makes per kernel and OS for precompiled drivers
#: (``nvidia-driver-daemonset-<kernel>-<os><version>``, e.g.
#: nvidia-driver-daemonset-5.15.0-1041-azure-ubuntu22.04; NVIDIA/gpu-operator#682).
PRECOMPILED_PREFIX = "nvidia-driver-daemonset-"
UPGRADE_STATE = "nvidia.com/gpu-driver-upgrade-state"


def _known(model: type[BaseModel], data: Any) -> Any:
    """``data`` with only the keys ``model`` knows, recursively (NVIDIA's spec has many more)."""
    if not isinstance(data, dict):
        return data
    out = {}
    for name, fld in model.model_fields.items():
        key = fld.alias or name
        if key not in data:
            continue
        sub = fld.annotation
        out[key] = _known(sub, data[key]) if isinstance(sub, type) and issubclass(sub, BaseModel) else data[key]
    return out


def lenient_policy(spec: dict[str, Any] | None) -> ClusterPolicySpec:
    """The switches gpuchain's checks read, from an NVIDIA ClusterPolicy spec.

    NVIDIA's schema is not gpuchain's: keys gpuchain does not model are dropped, and a block that
    still does not fit gpuchain's rules (an image tag style, a MIG default it would require) falls
    back to its defaults with its ``enabled`` switch kept. The NVIDIA operator validated the spec.
    """
    data = _known(ClusterPolicySpec, spec or {})
    reductions: tuple[Callable[[Any], Any], ...] = (
        lambda v: {"enabled": v["enabled"]} if isinstance(v, dict) and "enabled" in v else {},
        lambda v: {},
    )
    for reduce in reductions:
        parsed = parse_policy(data)
        if isinstance(parsed, ClusterPolicySpec):
            return parsed
        bad = {p.field.split(".")[0] for p in parsed}
        data = {k: reduce(v) if k in bad else v for k, v in data.items()}
    parsed = parse_policy(data)
    return parsed if isinstance(parsed, ClusterPolicySpec) else ClusterPolicySpec()


def driver_daemonsets(snapshot: Snapshot, namespace: str) -> list[Obj]:
    """The driver DaemonSets NVIDIADriver objects made (name ``nvidia-gpu-driver-...``)."""
    return [d for n, d in daemonsets_in(snapshot, namespace).items() if n.startswith(DRIVER_PREFIX)]


def reconciled(policies: list[Obj]) -> Obj | None:
    """Of several ClusterPolicies, the one NVIDIA's operator reconciles: it keeps the first it reconciles as its
    singleton and returns at once on any other, before writing status (controllers/clusterpolicy_controller.go
    @v24.6.2 to v25.10.1: "We already have a main Clusterpolicy"), so only that one carries a ``status.state``.
    None where that does not single one out (one policy, or none or several with a state)."""
    stated = [p for p in policies if ((p.get("status") or {}).get("state"))]
    return stated[0] if len(policies) > 1 and len(stated) == 1 else None


def detect(snapshot: Snapshot) -> Stack | None:
    """A nvidia.com ClusterPolicy, NVIDIA's validator DaemonSet in some namespace, or the operator's own
    pod (all a plain kubectl dump shows of an operator that never ran: no policy, no DaemonSet)."""
    policies = [p for p in snapshot.policies if str(p.get("apiVersion", "")).startswith(POLICY_GROUP + "/")]
    validators = [d for d in snapshot.daemonsets if name_of(d) == DAEMONSETS["operator-validation"]]
    operators = [] if policies or validators else [p for p in snapshot.pods if runs_operator(p)]
    # Before v1.5.0 the operator ran no validator DaemonSet, and a plain dump lists no policy: its driver and
    # toolkit DaemonSets, under names only its assets give (assets/state-driver, state-container-toolkit), show it.
    rendered = (
        [d for d in snapshot.daemonsets if name_of(d) in RENDERED_ONLY]
        if "clusterpolicies" in snapshot.absent and not policies and not validators and not operators
        else []
    )
    if not policies and not validators and not operators and not rendered:
        return None
    chosen = reconciled(policies)
    obj = chosen or active_policy(policies)
    status_ns = str((obj or {}).get("status", {}).get("namespace") or "")
    # Without a policy's status.namespace or a validator (before v1.5.0 the operator ran none), the operand
    # DaemonSets' namespace is the operands' (gpu-operator-resources then), not the operator pod's.
    operand_sets = [d for d in snapshot.daemonsets if name_of(d) in OPERAND_NAMES] if not validators else []
    found = validators or operand_sets or operators or rendered
    ds_ns = str((found[0].get("metadata") or {}).get("namespace") or "") if found else ""
    namespace = snapshot.namespace or status_ns or ds_ns or DEFAULT_NAMESPACE
    notes = []
    inferred: tuple[str, ...] = ()
    prefixes = {DRIVER_PREFIX: "driver", PRECOMPILED_PREFIX: "driver"}
    if obj is None and "clusterpolicies" in snapshot.absent:
        # A plain kubectl dump lists no ClusterPolicy: read its switches back from the DaemonSets it rendered.
        found_policy = infer_policy(snapshot, namespace, DAEMONSETS, CONTAINERS, prefixes)
        if found_policy is not None:
            obj, inferred = found_policy
            notes.append(
                f"ClusterPolicy not in the source: its switches read back from the operand DaemonSets of {namespace} "
                f"(the name {name_of(obj)} is a guess: kubectl get {POLICY_RESOURCE} names it)"
            )
    spec = lenient_policy((obj or {}).get("spec"))
    ignored = sorted(name_of(p) for p in policies if chosen is not None and p is not chosen)
    if ignored:
        notes.append(
            f"ClusterPolicy {', '.join(ignored)} ignored: NVIDIA's operator reconciles one ClusterPolicy "
            f"({name_of(chosen or {})}, the one with a status); delete the others, or move their settings into it"
        )
    if snapshot.drivers:
        notes.append(f"driver managed by NVIDIADriver: {', '.join(sorted(name_of(d) for d in snapshot.drivers))}")
    return Stack(
        id="gpu-operator",
        title="NVIDIA GPU Operator",
        namespace=namespace,
        daemonsets=dict(DAEMONSETS),
        containers=dict(CONTAINERS),
        policy=spec,
        policy_obj=obj,
        policy_inferred=inferred,
        policy_resource=POLICY_RESOURCE,
        prefixes=prefixes,
        precompiled_prefix=PRECOMPILED_PREFIX,
        driver_image_os=DRIVER_IMAGE_OS,
        chart=CHARTS["gpu-operator"],
        policy_names_images=True,
        policy_cdi=True,
        driver_resource="nvidiadrivers.nvidia.com",
        notes=tuple(notes),
    )
