"""The NVIDIA driver branch a CUDA release needs, so a "driver too old" fix names the driver to install.

The NVIDIA runtime hook refuses a container whose image requires a newer CUDA than the node's driver supports
("unsatisfied condition: cuda>=12.4", from the image's NVIDIA_REQUIRE_CUDA); a driver supports the CUDA release of
its branch and every earlier one. The pairs are NVIDIA's (CUDA Toolkit release notes, Table 3 "CUDA Toolkit and
Corresponding Driver Versions", docs.nvidia.com/cuda/cuda-toolkit-release-notes; the same table as
arrayfire/arrayfire src/backend/cuda/device_manager.cpp CudaToDriverVersion up to CUDA 12.6)."""

from __future__ import annotations

import re

#: CUDA release (major, minor) -> the first Linux driver branch that supports it.
BRANCHES: dict[tuple[int, int], int] = {
    (11, 0): 450,
    (11, 1): 455,
    (11, 2): 460,
    (11, 3): 465,
    (11, 4): 470,
    (11, 5): 495,
    (11, 6): 510,
    (11, 7): 515,
    (11, 8): 520,
    (12, 0): 525,
    (12, 1): 530,
    (12, 2): 535,
    (12, 3): 545,
    (12, 4): 550,
    (12, 5): 555,
    (12, 6): 560,
    (12, 7): 565,
    (12, 8): 570,
    (12, 9): 575,
    (13, 0): 580,
}
#: The hook's requirement as it prints it (NVIDIA/nvidia-container-toolkit internal/requirements/constraints).
REQUIRED = re.compile(r"\bcuda\s*>=\s*(\d+)\.(\d+)", re.IGNORECASE)


def branch_for(text: str) -> tuple[str, int] | None:
    """The CUDA release ``text`` requires and the first driver branch that supports it; None where the text names
    no requirement or one past the releases known here."""
    found = REQUIRED.search(text)
    if found is None:
        return None
    want = (int(found.group(1)), int(found.group(2)))
    branch = next((b for release, b in sorted(BRANCHES.items()) if release >= want), None)
    return (f"{want[0]}.{want[1]}", branch) if branch is not None else None


def needed(text: str) -> str:
    """The driver ``text``'s requirement asks for, in words for a fix ("" where it names none)."""
    found = branch_for(text)
    return (
        f"a driver of branch {found[1]} or later (the first to support CUDA {found[0]}, which the image requires)"
        if found
        else ""
    )
