"""MPS limits on a GPU share: pinned device memory per GPU and the share of its SMs a client may use.

One vocabulary for both ways gpuchain hands out shares: the device plugin's MPS daemon takes them
as defaults for every client (``set_default_device_pinned_mem_limit <index> <MiB>M``,
``set_default_active_thread_percentage <percent>`` on the control program's stdin, as NVIDIA's
plugin writes them), and a DRA claim's container takes its own as the client environment
(``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=<ordinal>=<MiB>M,...``, ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``,
the variables NVIDIA's MPS documentation names for a client's limits). Both limit only what runs
under an MPS daemon; without one the GPU is time-sliced and the limits are not enforced.

And one way to run that daemon, for both: ``MpsControl`` starts, asks and stops a control daemon
through NVIDIA's control program (compute mode ``EXCLUSIVE_PROCESS`` first, as NVIDIA's device
plugin does in ``cmd/mps-control-daemon/mps/daemon.go``), and ``keep_daemon`` keeps one answering,
reporting its health, restarting it with backoff. The device plugin runs one per MPS-shared
resource (``deviceplugin.mps``), the DRA plugin one per GPU whose shares are prepared (``dra.mps``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from gpuchain.common.supervise import Backoff

log = logging.getLogger("gpuchain.mps")

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


CONTAINER_ROOT = "/mps"
"""Where the daemon's directories are inside the daemon's and the workloads' containers."""
CONTROL_BINARY = "nvidia-cuda-mps-control"
SHM_DIR = "/dev/shm"
HEALTH_INTERVAL = 5.0
"""Seconds between two health questions to a running daemon."""
HEALTH_COMMAND = "get_default_active_thread_percentage"
NOT_INSTALLED = (
    "not found on PATH. It is part of the node's NVIDIA driver, not of the gpuchain image: run the "
    "device plugin (or the DRA plugin) with runtimeClassName nvidia and NVIDIA_DRIVER_CAPABILITIES including "
    "compute, so the NVIDIA container runtime injects it (gpuchain's operator does when a config has sharing.mps)"
)
"""Why the control program or nvidia-smi is missing, and the fix."""


@dataclass(frozen=True)
class MpsRoot:
    """The directory tree of the MPS daemons: ``<root>/<resource>/{pipe,log,.started}``, ``<root>/shm``."""

    path: str

    def pipe_dir(self, resource: str) -> str:
        return str(PurePosixPath(self.path, resource, "pipe"))

    def log_dir(self, resource: str) -> str:
        return str(PurePosixPath(self.path, resource, "log"))

    def started_file(self, resource: str) -> str:
        return str(PurePosixPath(self.path, resource, ".started"))

    def shm_dir(self) -> str:
        return str(PurePosixPath(self.path, "shm"))

    def env(self, resource: str) -> dict[str, str]:
        """The environment the control program needs to find (or start) the resource's daemon."""
        return {"CUDA_MPS_PIPE_DIRECTORY": self.pipe_dir(resource), "CUDA_MPS_LOG_DIRECTORY": self.log_dir(resource)}


class MpsError(RuntimeError):
    """The control program or nvidia-smi failed; the message quotes what it said."""


@dataclass(kw_only=True)
class MpsControl:
    """Talks to one MPS control daemon through NVIDIA's control program: the daemon of a resource
    (the device plugin's) or of a GPU (the DRA plugin's), which its directories are named after.

    ``visible_devices``: the daemon's ``CUDA_VISIBLE_DEVICES`` (None: every GPU), so that daemons of
    different GPUs on one node each serve their own, as NVIDIA's DRA driver starts its daemons."""

    resource: str
    root: MpsRoot = MpsRoot(CONTAINER_ROOT)
    binary: str = CONTROL_BINARY
    smi: str = "nvidia-smi"
    timeout: float = 10.0
    visible_devices: str | None = None

    async def _run(self, *argv: str, stdin: str | None = None) -> str:
        env = {**os.environ, **self.root.env(self.resource)}
        if self.visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.visible_devices
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
            )
        except FileNotFoundError:
            raise MpsError(f"{argv[0]}: {NOT_INSTALLED}") from None
        except OSError as exc:
            raise MpsError(f"{argv[0]}: {exc.strerror or exc}") from None
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the program's answer
            # when a cancel comes as it finishes (CPython gh-86296), and keep_daemon, which asks
            # every interval, then ran on after the plugin cancelled it: the plugin's stop hung.
            async with asyncio.timeout(self.timeout):
                out, _ = await proc.communicate(stdin.encode() if stdin is not None else None)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise MpsError(f"{' '.join(argv)}: no answer in {self.timeout:g}s") from None
        except asyncio.CancelledError:  # a keeper stopped mid-question: no program left behind unreaped
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        text = out.decode(errors="replace").strip()
        if proc.returncode != 0:
            raise MpsError(f"{' '.join(argv)} exited {proc.returncode}: {text or 'no output'}")
        return text

    async def ask(self, command: str) -> str:
        """Send one command to the daemon (as ``echo command | nvidia-cuda-mps-control``)."""
        return await self._run(self.binary, stdin=command)

    async def healthy(self) -> bool:
        """Whether the daemon answers NVIDIA's health question."""
        try:
            await self.ask(HEALTH_COMMAND)
        except MpsError as exc:
            log.debug("%s: MPS daemon health check failed: %s", self.resource, exc)
            return False
        return True

    async def start(self, commands: Sequence[str], gpu_uuids: Sequence[str]) -> None:
        """Compute mode exclusive, directories, the daemon, its limits, then the started file."""
        for uuid in gpu_uuids:
            await self._run(self.smi, "-i", uuid, "-c", "EXCLUSIVE_PROCESS")
        for directory in (self.root.pipe_dir(self.resource), self.root.log_dir(self.resource), self.root.shm_dir()):
            os.makedirs(directory, mode=0o755, exist_ok=True)
        await self._run(self.binary, "-d")
        for command in commands:
            await self.ask(command)
        with open(self.root.started_file(self.resource), "w", encoding="utf-8"):
            pass

    async def stop(self, gpu_uuids: Sequence[str]) -> None:
        """Quit the daemon, give the GPUs their default compute mode back, forget the started file."""
        with contextlib.suppress(MpsError):
            await self.ask("quit")
        for uuid in gpu_uuids:
            with contextlib.suppress(MpsError):
                await self._run(self.smi, "-i", uuid, "-c", "DEFAULT")
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.root.started_file(self.resource))
        import shutil  # here: it brings bz2 and lzma, which a device plugin without MPS never needs

        shutil.rmtree(self.root.log_dir(self.resource), ignore_errors=True)


async def keep_daemon(
    control: MpsControl,
    *,
    commands: Sequence[str],
    gpu_uuids: Sequence[str],
    on_health: Callable[[bool], None] = lambda up: None,
    interval: float = HEALTH_INTERVAL,
    backoff: Backoff | None = None,
    on_problem: Callable[[str], None] = lambda problem: None,
    stop_when_cancelled: bool = True,
) -> None:
    """Start the daemon and keep it answering: every ``interval`` ask it NVIDIA's health question;
    when it does not answer, report it down (once), start it again and, while that does not bring
    it back, retry with backoff (each failed start told to ``on_problem`` in words). A daemon that
    already answers is taken over as it is. Runs until cancelled, then stops the daemon, unless
    ``stop_when_cancelled`` is False (the DRA plugin's daemons outlive a plugin restart: their
    clients' claims stay prepared)."""
    backoff = backoff or Backoff(0.5, cap=30.0)
    up: bool | None = None
    try:
        answering = await control.healthy()
        while True:
            if answering:
                if up is not True:
                    log.info("%s: MPS control daemon is answering", control.resource)
                    on_health(True)
                up = True
                backoff.reset()
                await asyncio.sleep(interval)
                answering = await control.healthy()
                continue
            if up is not False:
                if up is True:
                    log.error("%s: MPS control daemon stopped answering; starting it again", control.resource)
                on_health(False)
            up = False
            try:
                await control.start(commands, gpu_uuids)
            except (MpsError, OSError) as exc:
                problem = str(exc)
            else:
                answering = await control.healthy()
                if answering:
                    continue
                problem = "started, but does not answer"
            on_problem(problem)
            wait = backoff.next()
            log.error("%s: MPS control daemon: %s; retrying in %.1fs", control.resource, problem, wait)
            await asyncio.sleep(wait)
            answering = await control.healthy()
    finally:
        if stop_when_cancelled:
            await asyncio.shield(control.stop(gpu_uuids))
