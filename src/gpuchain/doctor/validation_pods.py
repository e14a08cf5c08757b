"""The bare pods NVIDIA's GPU Operator (or its validator) creates to validate a link of the chain, outside any
DaemonSet (validation_pods.yaml): which pod is one, and the operator release from which it takes the ClusterPolicy's
tolerations. Read by links/validation_pending.py (the validated link's root) and scheduling.py (which then gives such
a pod no workload finding of its own)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuchain.doctor.packaged import packaged_yaml
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of

if TYPE_CHECKING:
    from gpuchain.doctor.context import Context


@dataclass(frozen=True, kw_only=True)
class ValidationPod:
    """A validation pod of the operator's and the release from which it takes the ClusterPolicy's tolerations."""

    app: str
    link: str
    fixed: str
    then: str
    key: str
    source: str
    line: str


@functools.cache
def validation_pods() -> tuple[ValidationPod, ...]:
    """Every entry of validation_pods.yaml."""
    entries = packaged_yaml("validation_pods.yaml")
    return tuple(ValidationPod(**{k: str(v).strip() for k, v in raw.items()}) for raw in entries)


def validation_of(ctx: Context, pod: Obj) -> ValidationPod | None:
    """The validation ``pod`` is, where it is one of the operator's in its namespace (None otherwise)."""
    if namespace_of(pod) != ctx.namespace or ctx.stack.id != "gpu-operator":
        return None
    app = labels_of(pod).get("app") or name_of(pod)
    return next((v for v in validation_pods() if app == v.app or app.startswith(f"{v.app}-")), None)
