"""The driver container's module refused on a Secure Boot node, in the words of the two places that say it besides
the ones gpuchain already knew: nvidia-installer's "Kernel module load error: %s" with ENOKEY's text (glibc's
"Required key not available", NVIDIA/nvidia-installer kernel.c) and the kernel's lockdown notice ("Lockdown: %s: %s
is restricted; see man kernel_lockdown.7", torvalds/linux security/lockdown/lockdown.c, whose reason for an unsigned
module is "unsigned module loading"). Both come after nvidia-installer's generic "Unable to load the kernel module",
whose usual causes (nouveau, an unsupported GPU) are not the repair there: Secure Boot or a signed module is.
"""

from __future__ import annotations

import pytest
from doctor.small_cluster import crashing_pod, diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp

OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n  - {name: n2}\n"
#: nvidia-installer's generic failure first, as it prints it (catalog nvidia-installer.load-failed's line).
UNABLE = "ERROR: Unable to load the kernel module 'nvidia.ko'.  This happens most frequently when ...\n"


@pytest.mark.parametrize(
    ("said", "entry"),
    [
        ("Kernel module load error: Required key not available\n", "nvidia-installer.load-no-key"),
        (
            "[   98.4] Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7\n",
            "kernel.lockdown-unsigned-module",
        ),
    ],
)
def test_a_module_the_lockdown_refuses_is_the_secure_boot_repair_not_nouveau(said: str, entry: str) -> None:
    report = diagnosed(
        OPERATOR,
        crashing_pod(
            "nvidia-driver-daemonset", "nvidia-driver-ctr", "n2", UNABLE + said + "ERROR: Installation has failed.\n"
        ),
    )
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.link, root.node) == ("driver", "n2")
    assert "Secure Boot" in root.fix and "mokutil" in root.fix and "nouveau" not in root.fix
    assert root.action is not None and root.action.op is FixOp.NODE
    assert any(entry in e for e in root.evidence)
