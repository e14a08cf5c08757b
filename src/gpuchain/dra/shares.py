"""GPU shares as consumable capacity (KEP-5075): several claims on one GPU, each with its stated share.

With ``--gpu-shares`` each whole GPU of the plain slice is published with
``allowMultipleAllocations: true``, and the kube-scheduler (``DRAConsumableCapacity`` gate, alpha in
Kubernetes 1.34) books what each claim asks in ``capacity.requests`` against the GPU's capacities:

- ``memory``: the GPU's memory in MiB. A claim that does not ask for memory takes all of it, so a
  claim written for a whole GPU still gets the GPU to itself; a claim asking for part of it shares
  the GPU with others whose requests fit beside it (step 1Mi, the MPS limit's unit).
- ``multiprocessors``: the GPU's SMs. A claim that does not ask for SMs books none and runs
  time-sliced beside the others without a compute cap; one asking for SMs books them and gets the
  matching share of threads.

The scheduler writes what it booked in the allocation result (``consumedCapacity``) under a
``shareID`` of its own per allocation; Prepare turns that into the claim's MPS limits
(``gpu.mps``): its memory as the pinned device memory limit, its SMs as the active thread
percentage, and names the claim's CDI device after the share so two shares of one GPU in one claim
stay apart. The limits hold where an MPS daemon serves the GPU; without one the GPU is time-sliced
and the shares are a scheduling promise only.

NVIDIA's DRA driver (``cmd/gpu-kubelet-plugin/consumable_shares.go``, ``ConsumableShares`` gate,
``--consumable-shares``) puts a request policy on ``memory`` alone (or adds a ``shares`` count) and
sets no limit at Prepare; its MPS sharing is refused there. GPUs published as partitionable devices
(``partitions``) and MIG devices are not shared here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpuchain.gpu.model import Gpu
from gpuchain.gpu.mps import MIB, MpsLimits, percentage
from gpuchain.kube.objects import Obj

MEMORY, MULTIPROCESSORS = "memory", "multiprocessors"
MAX_VALID_VALUES = 10
"""``CapacityRequestPolicyDiscreteMaxOptions``: at most this many ``validValues``."""

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")
_SCALE: dict[str | None, Fraction] = {
    None: Fraction(1),
    "m": Fraction(1, 1000),
    **{s: Fraction(1024**i) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)},
    **{s: Fraction(1000**i) for i, s in enumerate(("k", "M", "G", "T", "P", "E"), 1)},
}


def quantity(text: str) -> Fraction:
    """A Kubernetes quantity (``40Gi``, ``1.5k``, ``2e3``, ``100m``) as an exact number; ValueError
    for anything else."""
    found = _QUANTITY.match(str(text).strip())
    if not found:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (like 40Gi or 66)")
    number, suffix = Fraction(found.group(1)), found.group(2)
    if suffix and suffix[0] in "eE" and suffix not in _SCALE:
        exponent = int(suffix[1:])
        return number * (Fraction(10**exponent) if exponent >= 0 else Fraction(1, 10**-exponent))
    return number * _SCALE[suffix]


def share_capacity(gpu: Gpu) -> dict[str, Obj]:
    """The capacities of a shared GPU with their request policies (see the module doc)."""
    memory, sms = f"{gpu.memory_mib}Mi", str(gpu.multiprocessors)
    return {
        MEMORY: {
            "value": memory,
            "requestPolicy": {"default": memory, "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"}},
        },
        MULTIPROCESSORS: {
            "value": sms,
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": sms, "step": "1"}},
        },
    }


def shared_device(device: Obj, gpu: Gpu) -> Obj:
    """A whole GPU's device (``slices.gpu_device``) as one several claims may be allocated."""
    return {**device, "allowMultipleAllocations": True, "capacity": share_capacity(gpu)}


def check_capacity(where: str, *, name: str, capacity: Mapping[str, Any], multiple: bool) -> None:
    """Raise ValueError for a capacity the 1.34 API server refuses for its request policy
    (``validateMultiAllocatableDeviceCapacity`` and what it calls): a policy on a device not
    allowing multiple allocations, both kinds of valid values, a default outside them, or a range
    whose bounds or step do not fit the capacity."""
    policy = capacity.get("requestPolicy")
    if policy is None:
        return
    where = f"{where}: capacity {name!r}: requestPolicy"
    if not multiple:
        raise ValueError(f"{where} needs allowMultipleAllocations: true on the device")
    value = quantity(capacity["value"])
    values, span = policy.get("validValues"), policy.get("validRange")
    if values and span is not None:
        raise ValueError(f"{where}: validValues and validRange are exclusive")
    if not values and span is None:
        return
    if policy.get("default") is None:
        raise ValueError(f"{where}: default is required with validValues or validRange")
    default = quantity(policy["default"])
    if values:
        options = [quantity(v) for v in values]
        if options != sorted(options) or len(options) > MAX_VALID_VALUES or max(options) > value:
            raise ValueError(f"{where}: validValues must be ascending, at most {MAX_VALID_VALUES}, within the value")
        if default not in options:
            raise ValueError(f"{where}: default is not one of validValues")
        return
    low = quantity(span["min"])
    high = quantity(span["max"]) if span.get("max") is not None else None
    if not low <= default <= (value if high is None else high) or low > value or (high is not None and high > value):
        raise ValueError(f"{where}: needs min <= default <= max <= value")
    if span.get("step") is not None:
        step = quantity(span["step"])
        if step <= 0 or low + step > value:
            raise ValueError(f"{where}: min + step must not pass the value")
        for v in (default, high):
            if v is not None and (v - low) % step:
                raise ValueError(f"{where}: default and max must be min plus a multiple of step")


@dataclass(frozen=True, kw_only=True)
class Share:
    """One allocation of a shared GPU: the scheduler's share id and what it booked (memory in
    whole MiB, SMs) out of the GPU's ``gpu_multiprocessors``."""

    share_id: str
    memory_mib: int
    multiprocessors: int
    gpu_multiprocessors: int


def share_of(result: Mapping[str, Any], gpu: Gpu) -> Share | None:
    """The share an allocation result holds on ``gpu``, None for an exclusive allocation (no
    ``shareID``). Capacities the result does not list were booked at their defaults."""
    share_id = result.get("shareID")
    if not share_id:
        return None
    consumed = result.get("consumedCapacity") or {}
    memory = quantity(consumed[MEMORY]) if MEMORY in consumed else Fraction(gpu.memory_mib * MIB)
    sms = quantity(consumed.get(MULTIPROCESSORS, "0"))
    return Share(
        share_id=str(share_id),
        memory_mib=int(memory // MIB),
        multiprocessors=int(sms),
        gpu_multiprocessors=gpu.multiprocessors,
    )


def limits(devices: Sequence[tuple[str, Share | None]]) -> MpsLimits:
    """The MPS limits of a claim's container from its devices (GPU UUID, share; None for a device of
    its own, unlimited), in the order the container numbers the GPUs (each UUID once, at its first
    place). Memory per GPU, shares of one GPU added up; the thread percentage, one per client, is
    the smallest SM share of any GPU it shares, so no GPU runs more of the claim's threads than it
    booked; None when no share booked SMs."""
    ordinal = {uuid: i for i, uuid in enumerate(dict.fromkeys(uuid for uuid, _ in devices))}
    memory: dict[int, int] = {}
    sms: dict[int, tuple[int, int]] = {}
    for uuid, share in devices:
        if share is None:
            continue
        i = ordinal[uuid]
        memory[i] = memory.get(i, 0) + share.memory_mib
        booked = sms.get(i, (0, share.gpu_multiprocessors))[0] + share.multiprocessors
        sms[i] = (booked, share.gpu_multiprocessors)
    threads = [percentage(booked, total) for booked, total in sms.values() if booked]
    return MpsLimits(tuple(sorted(memory.items())), min(threads) if threads else None)
