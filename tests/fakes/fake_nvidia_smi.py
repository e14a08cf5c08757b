"""A fake ``nvidia-smi --gpu-reset -i ID``: a ProcessRunner for NvmlBackend's ``run_command``,
bound to the SimBackend that plays the node's driver.

nvidia-smi is a process of its own, so it refuses the reset while anything else holds the GPU:
every process that has NVML initialised (each initialised FakeNvml on the sim, fakes.fake_pynvml
``clients``) holds every GPU, and persistence mode holds its GPU (nvidia-persistenced; NVIDIA/
NVSentinel#1690). Its words and exit codes are the ones users quote:

- refused, exit 255: "The following GPUs could not be reset:" / "  GPU 00000000:01:00.0: In use
  by another client" / a blank line / "1 device is currently being used by one or more other
  processes (e.g., Fabric Manager, ...). Please first kill all processes using this device and
  all compute applications running in the system." (NVIDIA/mig-parted#181 with four GPUs and
  ``exit status 255``; ComputeCanada/puppet-magic_castle#387 with one; NVIDIA/NVSentinel#1690
  with ``exit=255``);
- done, exit 0: "GPU 00000000:1A:00.0 was successfully reset." (NVIDIA/NVSentinel#1690,
  NVIDIA/gpu-operator#118).

Otherwise the sim resets the GPU (``SimBackend.reset_gpu``: a failure set with ``fail_reset``, or
a lost GPU, is printed with the sim's own words and exit 255, nvidia-smi's "other error").
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pynvml

from fakes.fake_pynvml import clients, driver
from gpuchain.gpu.errors import GpuError
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import SimGpuSpec

IN_USE_EXIT = 255
HOLDERS = (
    "(e.g., Fabric Manager, CUDA application, graphics application such as an X server, or a monitoring "
    "application such as another instance of nvidia-smi)"
)


def refusal(bus_ids: Sequence[str]) -> str:
    """nvidia-smi's refusal of a reset of ``bus_ids`` (mig-parted#181's layout)."""
    lines = ["The following GPUs could not be reset:"]
    lines += [f"  GPU {bus}: In use by another client" for bus in bus_ids]
    count = len(bus_ids)
    devices = "1 device is" if count == 1 else f"{count} devices are"
    these = "this device" if count == 1 else "these devices"
    lines += [
        "",
        f"{devices} currently being used by one or more other processes {HOLDERS}. Please first kill all "
        f"processes using {these} and all compute applications running in the system.",
    ]
    return "\n".join(lines) + "\n"


class FakeNvidiaSmi:
    """``FakeNvidiaSmi(sim)`` as ``NvmlBackend(run_command=...)``. ``calls`` records each argv;
    ``before_each`` (if set) runs before each call is answered, to let a test act between tries.
    Other programs go to ``others`` (by default: not installed, as OSError)."""

    def __init__(
        self,
        sim: SimBackend,
        others: Callable[[Sequence[str], float], subprocess.CompletedProcess[str]] | None = None,
    ) -> None:
        self.sim = sim
        self.others = others
        self.calls: list[list[str]] = []
        self.before_each: Callable[[int], None] | None = None
        self._lock = threading.Lock()

    def __call__(self, argv: Sequence[str], deadline: float) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        if Path(argv[0]).name != "nvidia-smi":
            if self.others is None:
                raise FileNotFoundError(2, "No such file or directory", argv[0])
            return self.others(argv, deadline)
        with self._lock:
            self.calls.append(argv)
            tries = len(self.calls)
        if self.before_each is not None:
            self.before_each(tries)
        # Only the reset of one GPU is modelled; anything else is a mistake in the test.
        assert {"--gpu-reset", "-r"} & set(argv) and "-i" in argv[:-1], f"not a reset of one GPU: {argv}"
        spec = self._spec(argv[argv.index("-i") + 1])
        if clients(self.sim) or self._persistent(spec):
            return self._done(argv, IN_USE_EXIT, refusal([spec.pci_bus_id]))
        try:
            self.sim.reset_gpu(spec.index)
        except GpuError as exc:
            return self._done(argv, 255, f"{exc}\n")
        return self._done(argv, 0, f"GPU {spec.pci_bus_id} was successfully reset.\n")

    def _spec(self, ident: str) -> SimGpuSpec:
        for spec in self.sim.topology.expanded():
            if ident in (spec.uuid, str(spec.index), spec.pci_bus_id):
                return spec
        raise AssertionError(f"no GPU {ident} on the simulated node")

    def _persistent(self, spec: SimGpuSpec) -> bool:
        return driver(self.sim).persistence.get(spec.uuid, pynvml.NVML_FEATURE_ENABLED) == pynvml.NVML_FEATURE_ENABLED

    @staticmethod
    def _done(argv: list[str], code: int, stdout: str, stderr: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, code, stdout, stderr)
