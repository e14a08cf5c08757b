"""What NVIDIA's GPU Operator says about the operands it does not deploy: its own log and its ClusterPolicy's status.

Where an operand DaemonSet is missing, or exists but places no pod, the pods show nothing: the operator never made
them. The operator writes why in two places the doctor reads: its pod's log (controller-runtime's zap JSON, many of
the telling lines at info level, NVIDIA/gpu-operator controllers/clusterpolicy_controller.go, object_controls.go,
state_manager.go@v25.3.4) and its ClusterPolicy's ``status.conditions`` (a ``Ready`` condition whose reason is
``NFDLabelsMissing`` or ``NoGPUNodes``, an ``Error`` condition ``ReconcileFailed`` with the failing step's error:
internal/conditions). Both are matched against the catalog's entries of the operator (component
``gpu-operator (operator)``); an error line no entry knows stays unrecognised, quoted as such.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuchain.doctor import catalog
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: The entries that mean Node Feature Discovery's labels are missing (what repairs them is NFD's own state), the
#: more specific first.
NFD_ORDER = (
    "gpu-operator.kernel-label-missing",
    "gpu-operator.kernel-version-unresolved",
    "gpu-operator.nfd-labels-missing",
    "gpu-operator.condition-nfd-labels-missing",
    "gpu-operator.no-gpu-present-nodes",
    "gpu-operator.no-gpu-node",
)
NFD_SAYS = frozenset(NFD_ORDER)
#: The operator's entries, the more specific first: an API version the cluster no longer serves, the API server's
#: refusals of an object, the driver step's own failures, then the Node Feature Discovery labels it finds missing.
SAYS = (
    "gpu-operator.api-version-not-served",
    "gpu-operator.namespace-psa-label-refused",
    "gpu-operator.create-denied-by-webhook",
    "gpu-operator.create-webhook-unreachable",
    "gpu-operator.create-forbidden-rbac",
    "gpu-operator.nvidiadriver-selector-conflict",
    "gpu-operator.nvidiadriver-without-policy",
    "gpu-operator.precompiled-image-unresolved",
    "gpu-operator.precompiled-with-gds-or-gdrcopy",
    "gpu-operator.gds-needs-open-modules",
    "gpu-operator.os-mixed-for-kernel",
    "gpu-operator.repo-config-unsupported-os",
    "gpu-operator.os-release-unreadable",
    *NFD_ORDER,
)
#: The reason of a reconcile the operator completed with every operand ready (internal/conditions).
RECONCILED = "Reconciled"
#: The Ready condition's reasons that say the operator deployed nothing on any node, although "ready".
NOTHING_PLACED = ("NFDLabelsMissing", "NoGPUNodes")


def _operator_image(container: Obj) -> bool:
    """Does the container run NVIDIA's operator image (``.../gpu-operator:<tag>``)?"""
    return str(container.get("image", "")).rsplit(":", 1)[0].rsplit("/", 1)[-1] == "gpu-operator"


def runs_operator(pod: Obj) -> bool:
    """Does the pod run NVIDIA's operator image?"""
    return any(_operator_image(c) for c in (pod.get("spec") or {}).get("containers") or [])


def operator_containers(pods: list[Obj], namespace: str) -> list[tuple[Obj, str]]:
    """Each operator pod of ``namespace`` with the name of its container that runs the operator image."""
    return [
        (p, str(c.get("name", "")))
        for p in pods
        if namespace_of(p) == namespace
        for c in (p.get("spec") or {}).get("containers") or []
        if _operator_image(c)
    ]


def policy_said(policy: Obj | None) -> list[str]:
    """The ClusterPolicy's status lines that say why operands are missing: an ``Error`` condition that is True,
    and a ``Ready`` condition that is False or whose reason is one of `NOTHING_PLACED` (each as
    ``ClusterPolicy <type>=<status> (<reason>): <message>``)."""
    status = (policy or {}).get("status") or {}
    lines = []
    for c in status.get("conditions") or []:
        kind, state, reason = c.get("type"), c.get("status"), str(c.get("reason") or "")
        if (kind == "Error" and state == "True") or (
            kind == "Ready" and (state == "False" or reason in NOTHING_PLACED)
        ):
            said = " ".join(str(c.get("message") or "").split())  # a refusal's message spans lines
            lines.append(f"ClusterPolicy {kind}={state} ({reason}): {said}".rstrip(": "))
    return lines


def wants_log(policy: Obj | None) -> bool:
    """Whether the operator's log is worth a read: its ClusterPolicy does not say that it reconciled every operand
    (no status, state not ready, or a Ready condition with another reason than `RECONCILED`)."""
    status = (policy or {}).get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return status.get("state") != "ready" or ready is None or ready.get("reason") != RECONCILED


def placed_nowhere(policy: Obj | None) -> bool:
    """Whether the ClusterPolicy's Ready condition says the operator placed its operands on no node (its reason
    one of `NOTHING_PLACED`: no NFD label, no GPU node)."""
    status = (policy or {}).get("status") or {}
    return any(c.get("type") == "Ready" and c.get("reason") in NOTHING_PLACED for c in status.get("conditions") or [])


@dataclass(frozen=True, kw_only=True)
class OperatorSays:
    """What the operator said: the catalog's match (None when no entry knows its words), the error line no entry
    knows (its last at error level), and the evidence lines."""

    match: catalog.Match | None
    unknown: str | None
    evidence: tuple[str, ...]

    @property
    def about_nfd(self) -> bool:
        """Whether it says Node Feature Discovery's labels are missing."""
        return self.match is not None and self.match.entry.id in NFD_SAYS


def operator_says(
    pods: list[Obj], *, namespace: str, policy: Obj | None, log: Callable[[Obj, str], str]
) -> OperatorSays | None:
    """What the operator of ``namespace`` says in its log (``log(pod, container)``, "" where it was not read)
    and its ClusterPolicy's conditions; None when neither says anything."""
    conditions = policy_said(policy)
    logs = [(p, c, text) for p, c in operator_containers(pods, namespace) if (text := log(p, c))]
    text = "\n".join([*conditions, *(t for _, _, t in logs)])
    if not text:
        return None
    found = catalog.find(text, *SAYS)
    # No entry of the operator's knows its words: its last error line (else the Error condition) is quoted as such.
    errors = [ln.strip() for _, _, t in logs for ln in t.splitlines() if catalog.ERROR_LEVEL.search(ln.strip())]
    failed = [c for c in conditions if c.startswith("ClusterPolicy Error=True")]
    unknown = None if found is not None else (errors[-1] if errors else failed[0] if failed else None)
    if found is None and unknown is None and not conditions:
        return None
    evidence = list(conditions)
    if found is not None:
        said = next((p for p, _, t in logs if found.line in t), None) if found.line not in conditions else None
        if said is not None:
            evidence.append(f"operator log ({name_of(said)}): {found.line}")
        evidence.append(found.entry.cite())
    elif unknown is not None:
        evidence.append(f"{'operator log' if errors else 'ClusterPolicy status'}, unrecognised: {unknown}")
    return OperatorSays(match=found, unknown=unknown, evidence=tuple(evidence))


def operator_line(
    pods: list[Obj], *, namespace: str, log: Callable[[Obj, str], str], entry_id: str
) -> catalog.Match | None:
    """The line of the operator's log (where it was read) that catalog entry ``entry_id`` knows, or None."""
    text = "\n".join(t for p, c in operator_containers(pods, namespace) if (t := log(p, c)))
    return catalog.find(text, entry_id) if text else None
