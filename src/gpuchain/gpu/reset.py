"""Whether one GPU can be reset on its own, from what NVML says about it: a pure decision.

NVIDIA's rules (nvidia-smi(1), ``-r/--gpu-reset``, docs.nvidia.com/deploy/nvidia-smi):

- Starting with Ampere, GPUs with NVLink connections can be reset individually. On Ampere
  NVSwitch systems Fabric Manager is required to facilitate the reset; on Hopper and later
  NVSwitch systems it is not.
- If Fabric Manager is not running, or a GPU is older than Ampere, every GPU NVLink-connected to
  it must be reset in the same command; given an incomplete set, nvidia-smi refuses and names
  the GPUs missing.
- A GPU without NVLink resets alone.

gpuchain resets one drained GPU while the node's other GPUs keep serving. It never resets a set
of GPUs or a whole baseboard: that would need every GPU on it drained, which is a node repair, and
the loop already has one (the reboot request a reboot daemon acts on). So where one GPU cannot be
reset alone, the reset is refused with the reason and the loop asks for a reboot.

Fabric Manager's state on Ampere is not visible through NVML (``nvmlDeviceGetGpuFabricInfo``
answers on Hopper and later only), so an Ampere NVSwitch GPU is reset and nvidia-smi's own
refusal, when Fabric Manager is down, is the answer. On Hopper and later the GPU has to rejoin the
NVLink fabric after its reset; the burn-in waits for its fabric state to be completed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

AMPERE = 8
"""CUDA compute capability major of the first architecture that resets NVLink GPUs one by one."""
HOPPER = 9


class NvLink(enum.StrEnum):
    """What the GPU's active NVLinks lead to."""

    NONE = "none"
    DIRECT = "direct"
    NVSWITCH = "nvswitch"


@dataclass(frozen=True)
class ResetPlan:
    """Whether the GPU may be reset alone; ``reason`` says why not, or what to watch after."""

    allowed: bool
    reason: str


def plan_reset(gpu_index: int, *, compute_capability: tuple[int, int], nvlink: NvLink) -> ResetPlan:
    """The decision for one GPU (see the module docstring for NVIDIA's rules it follows)."""
    major = compute_capability[0]
    cc = f"{compute_capability[0]}.{compute_capability[1]}"
    if nvlink is NvLink.NONE:
        return ResetPlan(True, "no NVLink: the GPU resets alone")
    if major < AMPERE:
        return ResetPlan(
            False,
            f"GPU {gpu_index} (compute capability {cc}, older than Ampere) has NVLink peers that must be reset "
            "with it in one command; gpuchain resets one drained GPU at a time, so the node needs a reboot",
        )
    if nvlink is NvLink.NVSWITCH and major == AMPERE:
        return ResetPlan(True, "Ampere on NVSwitch: the reset needs Fabric Manager running (nvidia-smi refuses if not)")
    if nvlink is NvLink.NVSWITCH:
        return ResetPlan(True, "NVSwitch, Hopper or later: the GPU resets alone and rejoins the NVLink fabric")
    return ResetPlan(True, "direct NVLink, Ampere or later: the GPU resets alone")
