"""The kubelet's DRA side, as a test double and simulator engine: plugin watcher and DRA manager.

Like the kubelet's plugin watcher it looks for registration sockets in a ``plugins_registry``
directory, dials each new one, asks GetInfo, validates the answer and tells the plugin the
verdict with NotifyRegistrationStatus. A valid DRA plugin has type ``DRAPlugin``, a driver name,
an absolute endpoint and at least one DRAPlugin service version this peer speaks (``v1`` is
preferred over ``v1beta1``). Then, like the kubelet's DRA manager, it calls
NodePrepareResources / NodeUnprepareResources on the plugin's endpoint in the chosen version.

Everything goes over real unix sockets with the generated stubs, so a test talks to the plugin
exactly as the kubelet would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from gpuchain.common.supervise import reraise_cancel
from gpuchain.proto.dra.v1 import api_pb2 as v1
from gpuchain.proto.dra.v1 import api_pb2_grpc as v1_grpc
from gpuchain.proto.dra.v1beta1 import api_pb2 as v1beta1
from gpuchain.proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from gpuchain.proto.pluginregistration.v1 import api_pb2 as reg
from gpuchain.proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc

log = logging.getLogger(__name__)

DRA_PLUGIN_TYPE = "DRAPlugin"
SERVICES: dict[str, str] = {"v1": "v1.DRAPlugin", "v1beta1": "v1beta1.DRAPlugin"}
"""API version -> the service name a plugin lists in ``supported_versions``."""

_MODULES: dict[str, tuple[ModuleType, ModuleType]] = {"v1": (v1, v1_grpc), "v1beta1": (v1beta1, v1beta1_grpc)}
RPC_TIMEOUT = 10.0


class RegistrationError(RuntimeError):
    """A plugin's GetInfo answer was refused; the message is what the plugin was told."""


class DraCallError(RuntimeError):
    """A NodePrepareResources / NodeUnprepareResources call failed as a whole (not per claim)."""


@dataclass(frozen=True)
class DraClaim:
    """A ResourceClaim as the kubelet names it to the plugin."""

    namespace: str
    uid: str
    name: str


@dataclass(frozen=True, kw_only=True)
class DraDevice:
    """One prepared device: the requests it serves, its pool and name, the CDI ids to inject."""

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True)
class PrepareResult:
    """A claim's entry in NodePrepareResourcesResponse; ``error`` non-empty means it failed."""

    devices: tuple[DraDevice, ...] = ()
    error: str = ""


@dataclass(kw_only=True)
class DraPlugin:
    """A registered DRA plugin: its driver name, endpoint, the API version chosen and the channel."""

    name: str
    endpoint: str
    version: str
    registration_socket: Path
    channel: grpc.aio.Channel

    @property
    def service(self) -> str:
        return SERVICES[self.version]


def choose_version(info: reg.PluginInfo, supported: Sequence[str]) -> str:
    """Validate a GetInfo answer and pick the API version to speak; RegistrationError when none fits."""
    if info.type != DRA_PLUGIN_TYPE:
        raise RegistrationError(f"plugin type {info.type!r} is not handled here (expected {DRA_PLUGIN_TYPE!r})")
    if not info.name:
        raise RegistrationError("a DRA plugin must name its driver (PluginInfo.name is empty)")
    if not info.endpoint.startswith("/"):
        raise RegistrationError(f"DRA driver {info.name}: endpoint {info.endpoint!r} must be an absolute socket path")
    offered = set(info.supported_versions)
    for version in supported:
        if SERVICES[version] in offered:
            return version
    wanted = ", ".join(SERVICES[v] for v in supported)
    raise RegistrationError(
        f"DRA driver {info.name}: none of the services {sorted(offered)} is supported by this kubelet ({wanted})"
    )


class DraPeer:
    """The kubelet's plugin watcher (DRA plugins only) and DRA manager for one node."""

    def __init__(self, registry_dir: str | Path, supported: Sequence[str] = ("v1", "v1beta1")) -> None:
        unknown = [v for v in supported if v not in SERVICES]
        if unknown:
            raise ValueError(f"unknown DRA API versions {unknown}; known: {', '.join(SERVICES)}")
        self.registry_dir = Path(registry_dir)
        self.supported = tuple(supported)
        self.plugins: dict[str, DraPlugin] = {}
        self.refused: dict[Path, str] = {}
        self._seen: set[Path] = set()

    # ---- plugin watcher -----------------------------------------------------------------------

    async def register_socket(self, socket: Path) -> DraPlugin:
        """Run the registration handshake with the plugin behind ``socket``."""
        async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info = await stub.GetInfo(reg.InfoRequest(), timeout=RPC_TIMEOUT)
            try:
                version = choose_version(info, self.supported)
            except RegistrationError as exc:
                await stub.NotifyRegistrationStatus(
                    reg.RegistrationStatus(plugin_registered=False, error=str(exc)), timeout=RPC_TIMEOUT
                )
                raise
            old = self.plugins.pop(info.name, None)
            if old is not None:
                await old.channel.close(None)
            plugin = DraPlugin(
                name=info.name,
                endpoint=info.endpoint,
                version=version,
                registration_socket=socket,
                channel=grpc.aio.insecure_channel(f"unix://{info.endpoint}"),
            )
            self.plugins[info.name] = plugin
            try:
                await stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=RPC_TIMEOUT)
            except BaseException:
                # The plugin went away mid-handshake: the next scan retries the socket if it is still
                # there, so no entry may outlive this attempt (nothing would ever forget it).
                if self.plugins.get(info.name) is plugin:
                    del self.plugins[info.name]
                await plugin.channel.close(None)
                raise
        log.info("DRA driver %s registered (%s at %s)", plugin.name, plugin.service, plugin.endpoint)
        return plugin

    async def scan(self) -> list[DraPlugin]:
        """Handle registration sockets that appeared since the last scan; forget ones that went away.

        A refused plugin is remembered in ``refused`` (socket -> reason) and not retried until its
        socket is recreated.
        """
        present = set(self.registry_dir.glob("*.sock")) if self.registry_dir.is_dir() else set()
        for gone in self._seen - present:
            self._seen.discard(gone)
            self.refused.pop(gone, None)
            for name, plugin in list(self.plugins.items()):
                if plugin.registration_socket == gone:
                    await plugin.channel.close(None)
                    del self.plugins[name]
        added: list[DraPlugin] = []
        for socket in sorted(present - self._seen):
            self._seen.add(socket)
            try:
                added.append(await self.register_socket(socket))
            except RegistrationError as exc:
                self.refused[socket] = str(exc)
            except grpc.aio.AioRpcError as exc:
                reraise_cancel()
                self._seen.discard(socket)  # not serving yet: try again on the next scan
                log.debug("registration socket %s not answering: %s", socket, exc.code())
        return added

    async def watch(self, interval: float = 0.05) -> None:
        """Scan the registry directory until cancelled (the kubelet uses inotify; polling is enough here)."""
        while True:
            await self.scan()
            await asyncio.sleep(interval)

    async def wait_for(self, driver: str, *, timeout: float = 30.0, interval: float = 0.02) -> DraPlugin:
        """Scan until ``driver`` is registered; TimeoutError naming it otherwise (after a default
        that a loaded 2-core CI machine needs, as ``KubeletPeer.wait_for``'s)."""

        async def poll() -> DraPlugin:
            while driver not in self.plugins:
                await self.scan()
                if driver not in self.plugins:
                    await asyncio.sleep(interval)
            return self.plugins[driver]

        try:
            async with asyncio.timeout(timeout):  # not wait_for, which can swallow a cancel
                return await poll()
        except TimeoutError:
            raise TimeoutError(
                f"DRA driver {driver} did not register in {self.registry_dir} within {timeout}s"
            ) from None

    # ---- DRA manager --------------------------------------------------------------------------

    def _plugin(self, driver: str) -> tuple[DraPlugin, ModuleType, Any]:
        try:
            plugin = self.plugins[driver]
        except KeyError:
            raise DraCallError(f"DRA driver {driver} is not registered with this kubelet") from None
        pb, pb_grpc = _MODULES[plugin.version]
        return plugin, pb, pb_grpc.DRAPluginStub(plugin.channel)

    async def prepare(self, driver: str, claims: Iterable[DraClaim]) -> dict[str, PrepareResult]:
        """NodePrepareResources for ``claims``; the answer per claim UID (a missing one is an error entry)."""
        plugin, pb, stub = self._plugin(driver)
        wanted = list(claims)
        request = pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in wanted]
        )
        try:
            response = await stub.NodePrepareResources(request, timeout=RPC_TIMEOUT)
        except grpc.aio.AioRpcError as exc:
            reraise_cancel()
            raise DraCallError(f"NodePrepareResources on {plugin.name}: {exc.code().name}: {exc.details()}") from None
        results: dict[str, PrepareResult] = {}
        for claim in wanted:
            if claim.uid not in response.claims:
                results[claim.uid] = PrepareResult(error=f"the plugin did not answer for claim {claim.uid}")
                continue
            entry = response.claims[claim.uid]
            devices = tuple(
                DraDevice(
                    requests=tuple(d.request_names),
                    pool=d.pool_name,
                    device=d.device_name,
                    cdi_ids=tuple(d.cdi_device_ids),
                )
                for d in entry.devices
            )
            results[claim.uid] = PrepareResult(() if entry.error else devices, entry.error)
        return results

    async def unprepare(self, driver: str, claims: Iterable[DraClaim]) -> dict[str, str]:
        """NodeUnprepareResources for ``claims``; the error per claim UID ("" when it succeeded)."""
        plugin, pb, stub = self._plugin(driver)
        wanted = list(claims)
        request = pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in wanted]
        )
        try:
            response = await stub.NodeUnprepareResources(request, timeout=RPC_TIMEOUT)
        except grpc.aio.AioRpcError as exc:
            reraise_cancel()
            raise DraCallError(f"NodeUnprepareResources on {plugin.name}: {exc.code().name}: {exc.details()}") from None
        return {
            c.uid: response.claims[c.uid].error
            if c.uid in response.claims
            else f"the plugin did not answer for claim {c.uid}"
            for c in wanted
        }

    async def close(self) -> None:
        """Close every plugin channel."""
        for plugin in self.plugins.values():
            with contextlib.suppress(Exception):
                await plugin.channel.close(None)
        self.plugins.clear()
        self._seen.clear()
