"""MPS sharing as NVIDIA's plugin does it: a control daemon per shared resource, its limits, and
what a container asking for an MPS share is given.

``sharing.mps`` announces each GPU ``replicas`` times; without a control daemon those replicas
are plain time-slicing, with neither MPS's memory limit nor its compute share. NVIDIA's plugin
(k8s-device-plugin v0.18.0, ``cmd/mps-control-daemon/mps/daemon.go``) runs, per resource:

- ``nvidia-smi -i <uuid> -c EXCLUSIVE_PROCESS`` on every GPU of the resource (``DEFAULT`` on stop);
- ``nvidia-cuda-mps-control -d`` with ``CUDA_MPS_PIPE_DIRECTORY=<root>/<resource>/pipe`` and
  ``CUDA_MPS_LOG_DIRECTORY=<root>/<resource>/log``;
- through the control program's stdin, one ``set_default_device_pinned_mem_limit <index> <MiB>M``
  per GPU (its memory divided by its replicas, whole MiB) and one
  ``set_default_active_thread_percentage <100 / replicas>``;
- health: ``get_default_active_thread_percentage`` answered (``AssertHealthy``); ``quit`` stops it.

The device plugin (``internal/plugin/mps.go`` at v0.18.0) gives each container
``CUDA_MPS_PIPE_DIRECTORY=/mps/<resource>/pipe`` and mounts the host's ``<mpsRoot>/<resource>/pipe``
there and ``<mpsRoot>/shm`` at ``/dev/shm``. MPS is refused for MIG devices.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from gpuchain.common.supervise import Backoff
from gpuchain.deviceplugin.allocate import ContainerAllocation, MountSpec
from gpuchain.deviceplugin.resources import Resource
from gpuchain.gpu.mps import MpsLimits, percentage, split_memory_mib

log = logging.getLogger("gpuchain.mps")

CONTAINER_ROOT = "/mps"
"""Where the daemon's directories are inside the daemon's and the workloads' containers."""
CONTROL_BINARY = "nvidia-cuda-mps-control"
SHM_DIR = "/dev/shm"
HEALTH_INTERVAL = 5.0
"""Seconds between two health questions to a running daemon."""
HEALTH_COMMAND = "get_default_active_thread_percentage"
NOT_INSTALLED = (
    "not found on PATH. It is part of the node's NVIDIA driver, not of the gpuchain image: run the "
    "device plugin with runtimeClassName nvidia and NVIDIA_DRIVER_CAPABILITIES including compute, so "
    "the NVIDIA container runtime injects it (gpuchain's operator does when a config has sharing.mps)"
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


def check_shareable(resource: Resource) -> None:
    """Refuse MPS over MIG devices, as NVIDIA's plugin does (``getMPSOptions``)."""
    if any(d.mig_uuid is not None for d in resource.devices):
        raise ValueError(f"{resource.name}: sharing using MPS is not supported for MIG devices")


def daemon_commands(resource: Resource, memory_mib: Mapping[str, int]) -> list[str]:
    """What NVIDIA's daemon tells the control program after starting, for the same resource.

    ``memory_mib``: each GPU's memory by UUID. The pinned-memory limit of a GPU is its memory
    divided by the replicas announced for it, in whole MiB (NVIDIA divides bytes by replicas, then
    by 1 MiB, rounding down); the thread percentage is 100 divided by the replicas per GPU
    (all announced devices over distinct GPUs, rounded down). A GPU of unknown memory gets no limit.
    """
    check_shareable(resource)
    replicas: dict[str, int] = {}
    index: dict[str, int] = {}
    for d in resource.devices:
        replicas[d.gpu_uuid] = replicas.get(d.gpu_uuid, 0) + 1
        index[d.gpu_uuid] = d.gpu_index
    gpus = sorted(replicas, key=lambda u: index[u])
    memory = tuple((index[u], split_memory_mib(memory_mib[u], replicas[u])) for u in gpus if memory_mib.get(u, 0))
    threads = percentage(1, len(resource.devices) // len(replicas)) if replicas else None
    return MpsLimits(memory, threads).control_commands()


def with_mps(alloc: ContainerAllocation, resource: str, host_root: str) -> ContainerAllocation:
    """``alloc`` with what a container of an MPS share needs: the daemon's pipe directory (in the
    environment and mounted from the host) and the daemon's shared memory at ``/dev/shm``, both
    writable, as NVIDIA's plugin mounts them."""
    inside, host = MpsRoot(CONTAINER_ROOT), MpsRoot(host_root)
    mounts = (
        MountSpec(inside.pipe_dir(resource), host.pipe_dir(resource)),
        MountSpec(SHM_DIR, host.shm_dir()),
    )
    envs = {**alloc.envs, "CUDA_MPS_PIPE_DIRECTORY": inside.pipe_dir(resource)}
    return replace(alloc, envs=envs, mounts=alloc.mounts + mounts)


class MpsError(RuntimeError):
    """The control program or nvidia-smi failed; the message quotes what it said."""


@dataclass
class MpsControl:
    """Talks to one resource's MPS control daemon through NVIDIA's control program."""

    resource: str
    root: MpsRoot = MpsRoot(CONTAINER_ROOT)
    binary: str = CONTROL_BINARY
    smi: str = "nvidia-smi"
    timeout: float = 10.0

    async def _run(self, *argv: str, stdin: str | None = None) -> str:
        env = {**os.environ, **self.root.env(self.resource)}
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
        shutil.rmtree(self.root.log_dir(self.resource), ignore_errors=True)


async def keep_daemon(
    control: MpsControl,
    commands: Sequence[str],
    gpu_uuids: Sequence[str],
    on_health: Callable[[bool], None] = lambda up: None,
    interval: float = HEALTH_INTERVAL,
    backoff: Backoff | None = None,
) -> None:
    """Start the daemon and keep it answering: every ``interval`` ask it NVIDIA's health question;
    when it does not answer, report it down (once), start it again and, while that does not bring
    it back, retry with backoff. Runs until cancelled, then stops the daemon."""
    backoff = backoff or Backoff(0.5, 30.0)
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
            wait = backoff.next()
            log.error("%s: MPS control daemon: %s; retrying in %.1fs", control.resource, problem, wait)
            await asyncio.sleep(wait)
            answering = await control.healthy()
    finally:
        await asyncio.shield(control.stop(gpu_uuids))
