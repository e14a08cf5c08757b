"""The burn-in a simulated GPU runs after a reset: the checks NvmlBackend runs, modelled.

Kept apart from `SimBackend`: which checks run on which GPU, in which order, and what a check a test
told to fail reports, is burn-in policy; the backend only supplies the GPU's state and NVML's verdict.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuchain.gpu.backend import BurnInCheck
from gpuchain.gpu.simstate import GpuState

BURN_IN_FAILURES = {
    "nvml": "NVML did not answer",
    "cuda": "test kernel returned wrong results",
    "memory": "memory test found errors",
    "fabric": "NVLink fabric state In Progress after 60 s",
    "dcgm": "diagnostic: DCGM's diagnostic test failed on this GPU",
}
"""The burn-in checks SimBackend models, in order, and what each reports when told to fail:
the same checks NvmlBackend runs (fabric only on Hopper-or-later NVSwitch GPUs, dcgm only where
``dcgm`` says the node has DCGM)."""
BURN_IN_CHECKS = tuple(BURN_IN_FAILURES)
_BURN_IN_ORDER = ("nvml", "fabric", "cuda", "memory", "dcgm")
"""The order the checks run in, as on hardware: nothing runs on a GPU NVML found at fault."""


def run_checks(
    state: GpuState, *, interconnect: str | None, dcgm: bool, nvml_verdict: Callable[[], tuple[bool, str]]
) -> tuple[list[BurnInCheck], dict[str, str]]:
    """The checks that ran (in BURN_IN_CHECKS order) and those skipped with why. ``nvml_verdict``
    judges the GPU's health readings; a failure set by ``fail_burn_in`` is used up as it fails."""
    checks: list[BurnInCheck] = []
    skipped: dict[str, str] = {}
    for name in _BURN_IN_ORDER:
        why_not = _skip(state, name, checks, interconnect=interconnect, dcgm=dcgm)
        if why_not:
            skipped[name] = why_not
            continue
        left = state.burn_in_failures.get(name, 0)
        passed, detail = True, ""
        if name == "nvml" and state.lost:
            passed, detail = False, "GPU does not answer"
        elif name == "nvml":
            passed, detail = nvml_verdict()
        elif left:
            state.burn_in_failures[name] = left - 1 if left > 0 else left
            passed, detail = False, BURN_IN_FAILURES[name]
        checks.append(BurnInCheck(name, passed, detail))
    checks.sort(key=lambda c: BURN_IN_CHECKS.index(c.name))
    return checks, skipped


def _skip(state: GpuState, name: str, done: list[BurnInCheck], *, interconnect: str | None, dcgm: bool) -> str:
    """Why ``name`` does not run on this GPU now (empty: it runs), as NvmlBackend decides."""
    if name == "nvml":
        return ""
    if not all(c.passed for c in done if c.name in ("nvml", "fabric")):
        return "not run: an NVML check failed"
    if name == "fabric":
        nvswitch = (interconnect or ("nvswitch" if state.spec.model.nvlinks else "pcie")) == "nvswitch"
        if state.spec.model.compute_capability[0] < 9 or not nvswitch:
            return "not an NVSwitch fabric GPU (Hopper or later on NVSwitch)"
        return ""
    if name in ("cuda", "memory") and state.mig_enabled:
        return "not run: MIG mode is on, CUDA runs only inside MIG devices"
    if name == "dcgm" and not dcgm:
        return "no DCGM on this simulated node"
    if name == "memory" and not done[-1].passed:
        return "not run: the CUDA check failed"
    return ""
