"""MPS limits on a GPU share: pinned device memory per GPU and the share of its SMs a client may use.

One vocabulary for both ways gpuchain hands out shares: the device plugin's MPS daemon takes them
as defaults for every client (``set_default_device_pinned_mem_limit <index> <MiB>M``,
``set_default_active_thread_percentage <percent>`` on the control program's stdin, as NVIDIA's
plugin writes them), and a DRA claim's container takes its own as the client environment
(``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=<ordinal>=<MiB>M,...``, ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``,
the variables NVIDIA's MPS documentation names for a client's limits). Both limit only what runs
under an MPS daemon; without one the GPU is time-sliced and the limits are not enforced.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024
PINNED_MEM_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
THREAD_PERCENTAGE_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


def split_memory_mib(memory_mib: int, replicas: int) -> int:
    """One of ``replicas`` equal shares of a GPU's memory in whole MiB (NVIDIA divides the bytes by
    the replicas, then by 1 MiB, rounding down)."""
    return memory_mib * MIB // replicas // MIB


def percentage(part: int, whole: int) -> int:
    """``part`` of ``whole`` in whole percent, rounded down, at least 1 (MPS refuses 0)."""
    return max(1, 100 * part // whole)


@dataclass(frozen=True)
class MpsLimits:
    """What MPS limits a client to: pinned memory (MiB) per GPU, keyed by the GPU's index as the
    daemon or the client numbers it, and the active thread percentage (None: no limit)."""

    memory_mib: tuple[tuple[int, int], ...] = ()
    thread_percentage: int | None = None

    def control_commands(self) -> list[str]:
        """The daemon-wide defaults, as commands to the control program (indexes are the host's)."""
        commands = [f"set_default_device_pinned_mem_limit {index} {mib}M" for index, mib in self.memory_mib]
        if self.thread_percentage is not None:
            commands.append(f"set_default_active_thread_percentage {self.thread_percentage}")
        return commands

    def client_env(self) -> dict[str, str]:
        """One client's limits, as its environment (indexes are CUDA ordinals inside the container)."""
        env: dict[str, str] = {}
        if self.memory_mib:
            env[PINNED_MEM_ENV] = ",".join(f"{index}={mib}M" for index, mib in self.memory_mib)
        if self.thread_percentage is not None:
            env[THREAD_PERCENTAGE_ENV] = str(self.thread_percentage)
        return env
