"""A validation of NVIDIA's validator whose CUDA says the driver is too old: the driver link's failure, not the
link the validation stands for.

The validator's ``cuda-validation`` runs NVIDIA's vectorAdd CUDA sample (NVIDIA/gpu-operator
validator/Dockerfile@v22.9.0: the sample copied from ``nvcr.io/nvidia/k8s/cuda-sample``) in a workload pod the
runtime set up: where it got that far and CUDA answers cudaErrorInsufficientDriver ("CUDA driver version is
insufficient for CUDA runtime version", catalog.yaml's cuda.* entries of `cuda_repair.INSUFFICIENT`), the runtime did
its part and what CUDA refuses is the node's driver, for the sample's CUDA release. The repair is then what lets that
sample run on a driver the GPU can take: the validator release that fixed the image (releases.yaml, symptom
``validation``), else the catalog entry's own (a driver of a branch the CUDA release supports, or another image).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuchain.doctor import catalog
from gpuchain.doctor.catalog import Entry
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.links.cuda_repair import INSUFFICIENT
from gpuchain.doctor.links.releases import release_repair
from gpuchain.doctor.releases import showing
from gpuchain.operator.operands import DRIVER

if TYPE_CHECKING:
    from gpuchain.doctor.context import Context, NodeView
    from gpuchain.kube.objects import Obj

#: The link a validation proves broken when its CUDA names the driver too old, whatever link the validation stands for.
DRIVER_LINK = "driver"


def validation_proves(text: str, validated: str | None) -> str | None:
    """The link a failing validation proves broken: ``validated`` (the link it stands for, `Stack.validations`), but
    the driver's where the validation's CUDA said the driver is too old for it (a CUDA error that reached the driver
    proves the runtime set the container up)."""
    if not validated or validated == DRIVER_LINK:
        return validated
    said = catalog.known_error(text)
    return DRIVER_LINK if said is not None and said.entry.id in INSUFFICIENT else validated


def validation_release(ctx: Context, *, view: NodeView, pod: Obj, entry: Entry | None) -> Known | None:
    """The release of the validator that repairs a validation failing with ``entry``'s message (releases.yaml entries
    of symptom ``validation``), read from the GPU Operator release the cluster runs; None where none is known or the
    running release is not one it affects."""
    shown = showing("validation", entry.id) if entry is not None else ()
    return release_repair(ctx, view=view, pod=pod, operand=DRIVER, shown=shown) if shown else None
