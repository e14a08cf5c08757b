"""MPS control daemons for GPU shares (``--gpu-shares`` with ``--mps-root``): the limits Prepare
writes into a share's container hold only where an MPS daemon serves its GPU.

One daemon per GPU, while shares of part of it are prepared: started by the first such share's
Prepare (which answers only once the daemon answers), stopped after the last one's Unprepare.
Shares of one GPU come from different claims of different sizes, so the daemon has no daemon-wide
limits: each client brings its own (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``,
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` in its CDI spec, ``dra.shares``). A share that books all of a
GPU's memory is alone on it and needs no daemon.

The daemon is the device plugin's (``gpu.mps``: ``nvidia-smi -c EXCLUSIVE_PROCESS``, then
``nvidia-cuda-mps-control -d``, health asked every few seconds, restarted with backoff), with
``CUDA_VISIBLE_DEVICES`` set to its GPU as NVIDIA's DRA driver starts its daemons
(k8s-dra-driver-gpu ``templates/mps-control-daemon.tmpl.yaml``), its pipe and log directories
under ``<mps root>/<GPU UUID>``. A share's container gets what NVIDIA's DRA driver gives one
(``cmd/gpu-kubelet-plugin/sharing.go``, ``GetCDIContainerEdits``): ``CUDA_MPS_PIPE_DIRECTORY=
/tmp/nvidia-mps`` with the daemon's pipe directory mounted there, and the daemons' shared memory
(``<mps root>/shm``, the plugin's own ``/dev/shm``) at ``/dev/shm``. Like NVIDIA's, the log
directory stays with the daemon: clients never read it.

A daemon that stops answering makes its GPU unhealthy (withdrawn, or tainted
``mps-daemon-down``) and its shares refused until it answers again. The daemons outlive a restart
of the plugin inside its container (not the container: they are its processes, docs/dra.md):
the restarted plugin takes over those its checkpoint still needs, and stops those it does not (a
crash between starting one and recording the claim).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path

from gpuchain.common.supervise import cancel_and_wait, spawn
from gpuchain.dra.cdi import MpsClient
from gpuchain.dra.errors import PrepareError
from gpuchain.dra.shares import Share
from gpuchain.gpu.model import Gpu
from gpuchain.gpu.mps import HEALTH_INTERVAL, SHM_DIR, MpsControl, MpsRoot, keep_daemon

log = logging.getLogger(__name__)

CLIENT_PIPE_DIR = "/tmp/nvidia-mps"
"""Where a share's container finds its daemon's pipe directory (NVIDIA's DRA driver's path, and
the MPS default, so a client that ignores ``CUDA_MPS_PIPE_DIRECTORY`` still finds it)."""
MOUNT_OPTIONS = ("rw", "nosuid", "nodev", "bind")
START_TIMEOUT = 60.0
"""Seconds a first share's Prepare waits for its GPU's daemon to answer before it fails (the
kubelet retries it): a start runs nvidia-smi and the control program, each may take seconds."""
CALL_TIMEOUT = 120.0
"""Seconds a Prepare or Unprepare waits for the daemons to be started or stopped on the loop."""


def needs_daemon(share: Share | None, gpu_memory_mib: int) -> bool:
    """Whether a share runs under its GPU's daemon: it books part of the GPU's memory, so other
    shares may run beside it. A share of all the memory is alone on the GPU."""
    return share is not None and share.memory_mib < gpu_memory_mib


def wanted(gpus: Iterable[Gpu], held: Iterable[tuple[str, Share | None]]) -> dict[str, int]:
    """The GPUs (UUID -> index) whose daemon the shares ``held`` (GPU UUID, share) need."""
    by_uuid = {g.uuid: g for g in gpus}
    return {
        uuid: by_uuid[uuid].index
        for uuid, share in held
        if uuid in by_uuid and needs_daemon(share, by_uuid[uuid].memory_mib)
    }


def client_gpu(where: str, *, held: Iterable[tuple[str, Share | None]], gpus: Iterable[Gpu]) -> str | None:
    """The GPU whose daemon a claim's container talks to (None: it has no share needing one), the
    claim holding ``held`` (GPU or MIG UUID, share). A container talks to one daemon, and there is
    one per GPU: a claim with part of a GPU holds shares of that GPU only, else PrepareError."""
    memory = {g.uuid: g.memory_mib for g in gpus}
    devices = list(held)
    needing = {uuid for uuid, share in devices if needs_daemon(share, memory.get(uuid, 0))}
    if not needing:
        return None
    if len(needing) > 1 or any(uuid not in needing or share is None for uuid, share in devices):
        raise PrepareError(
            f"{where}: holds part of a GPU beside other devices; its container would need one MPS control "
            "daemon for all of them, and this node runs one per GPU: ask for each shared GPU in a claim of its own"
        )
    return needing.pop()


def client_edits(root: MpsRoot, gpu_uuid: str) -> MpsClient:
    """The environment and mounts of a container whose shares run under ``gpu_uuid``'s daemon, as
    CDI container edits."""
    mounts: list[dict[str, object]] = [
        {"hostPath": root.pipe_dir(gpu_uuid), "containerPath": CLIENT_PIPE_DIR, "options": list(MOUNT_OPTIONS)},
        {"hostPath": root.shm_dir(), "containerPath": SHM_DIR, "options": list(MOUNT_OPTIONS)},
    ]
    return [f"CUDA_MPS_PIPE_DIRECTORY={CLIENT_PIPE_DIR}"], mounts


@dataclass(kw_only=True)
class _Keeper:
    """One GPU's daemon as kept now: the task keeping it, whether it answers (None: not yet; also
    ``answered``, for Prepare's threads to wait on), and what went wrong last."""

    control: MpsControl
    reported: bool
    """Whether a daemon that does not answer is reported down: at once for a daemon whose claims
    were prepared before (a restart), only after it first answered for one a Prepare starts."""
    up: bool | None = None
    answered: threading.Event = field(default_factory=threading.Event)
    problem: str = ""
    task: asyncio.Task[None] | None = None


class GpuDaemons:
    """The MPS daemons of a node's shared GPUs, kept on the plugin's event loop.

    ``want`` and ``wait_up`` are called from Prepare and Unprepare, which run on worker threads
    (``dra.server``), never from the loop itself; ``on_health(gpu_uuid, up)`` is called on the loop
    when a reported daemon's health changes.
    """

    def __init__(
        self,
        root: Path,
        *,
        on_health: Callable[[str, bool], None] = lambda uuid, up: None,
        interval: float = HEALTH_INTERVAL,
    ) -> None:
        self.root = MpsRoot(str(root))
        self.on_health = on_health
        self.interval = interval
        self.start_timeout = START_TIMEOUT
        """Seconds a first share's Prepare waits for its GPU's daemon to answer."""
        self._keepers: dict[str, _Keeper] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changes = asyncio.Lock()

    @property
    def down(self) -> frozenset[str]:
        """GPUs whose daemon is reported and does not answer."""
        return frozenset(uuid for uuid, k in list(self._keepers.items()) if k.reported and k.up is False)

    @property
    def serving(self) -> bool:
        """Whether the daemons are being kept (``run`` is running): Prepare may start one."""
        return self._loop is not None

    async def run(self, wanted: Mapping[str, int]) -> None:
        """Keep the daemons until cancelled, from the ones ``wanted`` (GPU UUID -> index: the GPUs of
        the shares the checkpoint holds) on: a daemon left for any other GPU is stopped. Cancelled,
        it lets the daemons run on (their claims stay prepared across a plugin restart)."""
        self._loop = asyncio.get_running_loop()
        try:
            async with self._changes:
                for uuid in sorted(self._started() - set(wanted)):
                    log.info("GPU %s: stopping the MPS control daemon no prepared share needs", uuid)
                    await self._control(uuid).stop([uuid])
                await self._reconcile(wanted, reported=True)
            await asyncio.Event().wait()
        finally:
            self._loop = None
            await cancel_and_wait(*(k.task for k in self._keepers.values() if k.task is not None))
            self._keepers.clear()

    def want(self, wanted: Mapping[str, int]) -> None:
        """Keep a daemon for exactly these GPUs (UUID -> index): start the missing, stop the others.
        Blocks until done; raises RuntimeError when the daemons are not being kept (no loop)."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the MPS control daemons are not being kept (the plugin is not serving)")
        future = asyncio.run_coroutine_threadsafe(self._locked_reconcile(dict(wanted)), loop)
        try:
            future.result(CALL_TIMEOUT)
        except FutureTimeout:
            future.cancel()
            raise RuntimeError(f"starting or stopping MPS control daemons took over {CALL_TIMEOUT:g}s") from None

    def wait_up(self, gpu_uuid: str) -> str | None:
        """Wait (``start_timeout`` at most) for the GPU's daemon to answer: None once it does, else
        what went wrong."""
        keeper = self._keepers.get(gpu_uuid)
        if keeper is None:
            return "no MPS control daemon is kept for it"
        timeout = self.start_timeout
        if keeper.answered.wait(timeout):
            return None
        return f"its MPS control daemon did not answer within {timeout:g}s ({keeper.problem or 'still starting'})"

    async def _locked_reconcile(self, wanted: dict[str, int]) -> None:
        async with self._changes:
            if self._loop is None:  # ``run`` ended while this waited: a keeper now would be nobody's
                raise RuntimeError("the MPS control daemons are no longer kept (the plugin is stopping)")
            await self._reconcile(wanted, reported=False)

    async def _reconcile(self, wanted: Mapping[str, int], reported: bool) -> None:
        for uuid in sorted(set(self._keepers) - set(wanted)):
            keeper = self._keepers[uuid]
            if keeper.task is not None:
                await cancel_and_wait(keeper.task)
            await keeper.control.stop([uuid])
            del self._keepers[uuid]  # only once stopped: a stop cut short is done by the next change
            log.info("GPU %s: stopped its MPS control daemon (no share of it is prepared)", uuid)
            if keeper.reported and keeper.up is False:
                self.on_health(uuid, True)  # nothing left to be unhealthy about
        keeping = {u for u, k in self._keepers.items() if k.task is not None and not k.task.done()}
        for uuid in sorted(set(wanted) - keeping):  # a keeper whose stop was cut short is replaced
            keeper = _Keeper(control=self._control(uuid), reported=reported)
            keeper.task = spawn(f"dra-plugin: MPS control daemon of GPU {wanted[uuid]}", run=self._keep(uuid, keeper))
            self._keepers[uuid] = keeper

    def _keep(self, uuid: str, keeper: _Keeper) -> Callable[[], Awaitable[None]]:
        """What the supervisor runs (again, should it fail) for one GPU's daemon: ``keep_daemon``
        with no daemon-wide limits, leaving the daemon running when cancelled."""

        def health(up: bool) -> None:
            keeper.up = up
            if up:
                keeper.answered.set()
                keeper.reported = True
            else:
                keeper.answered.clear()  # a Prepare waits for it to answer again (``wait_up``)
            if keeper.reported:
                self.on_health(uuid, up)

        def problem(text: str) -> None:
            keeper.problem = text

        def run() -> Awaitable[None]:
            return keep_daemon(
                keeper.control,
                commands=[],
                gpu_uuids=[uuid],
                on_health=health,
                interval=self.interval,
                backoff=None,
                on_problem=problem,
                stop_when_cancelled=False,
            )

        return run

    def _control(self, uuid: str) -> MpsControl:
        return MpsControl(resource=uuid, root=self.root, visible_devices=uuid)

    def _started(self) -> set[str]:
        """GPUs with a daemon started under the root (its started file), by an earlier plugin too."""
        with contextlib.suppress(FileNotFoundError):
            return {e.name for e in os.scandir(self.root.path) if os.path.exists(self.root.started_file(e.name))}
        return set()
