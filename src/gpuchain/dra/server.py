"""The DRA kubelet plugin's gRPC side: two unix sockets, as the kubelet's plugin watcher expects.

- ``<registry dir>/gpu.gpuchain.io-reg.sock`` serves ``pluginregistration.Registration``: GetInfo
  answers type ``DRAPlugin``, the driver name, the endpoint and the service versions
  (``v1.DRAPlugin``, ``v1beta1.DRAPlugin``); NotifyRegistrationStatus records the kubelet's verdict.
- ``<plugin dir>/dra.sock`` serves the DRA node service in both API versions (the kubelet picks
  one from the advertised list): NodePrepareResources / NodeUnprepareResources.

A claim that fails gets an error in its own entry; the others are still answered, as the API
asks. The services only translate between protobuf and ``DraDriver``; the work runs in a
thread so a slow API server does not stall the gRPC loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from gpuchain.dra.driver import ClaimRef, DraDriver
from gpuchain.dra.errors import PrepareError
from gpuchain.dra.kinds import DRIVER
from gpuchain.proto.dra.v1 import api_pb2 as v1
from gpuchain.proto.dra.v1 import api_pb2_grpc as v1_grpc
from gpuchain.proto.dra.v1beta1 import api_pb2 as v1beta1
from gpuchain.proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from gpuchain.proto.pluginregistration.v1 import api_pb2 as reg
from gpuchain.proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc

log = logging.getLogger(__name__)
Ctx = grpc.aio.ServicerContext[Any, Any]

PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
"""What GetInfo advertises: the DRAPlugin service names the kubelet looks for, newest first."""

DEFAULT_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/plugins") / DRIVER
REGISTRATION_SOCKET = f"{DRIVER}-reg.sock"
ENDPOINT_SOCKET = "dra.sock"


@dataclass(frozen=True)
class RegistrationState:
    """The kubelet's last answer to our registration (None until it calls)."""

    registered: bool
    error: str


class _Registration(reg_grpc.RegistrationServicer):
    def __init__(self, server: DraPluginServer) -> None:
        self._server = server

    async def GetInfo(self, request: reg.InfoRequest, context: Ctx) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=PLUGIN_TYPE,
            name=DRIVER,
            endpoint=str(self._server.endpoint),
            supported_versions=list(self._server.services),
        )

    async def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: Ctx
    ) -> reg.RegistrationStatusResponse:
        self._server.notify(RegistrationState(request.plugin_registered, request.error))
        return reg.RegistrationStatusResponse()


def _prepare_all(driver: DraDriver, pb: ModuleType, request: Any) -> Any:
    """NodePrepareResources for either API version (the message shapes are identical)."""
    response = pb.NodePrepareResourcesResponse()
    for claim in request.claims:
        entry = response.claims[claim.uid]
        try:
            prepared = driver.prepare(ClaimRef(claim.namespace, claim.uid, claim.name))
        except PrepareError as exc:
            entry.error = str(exc)
            continue
        except Exception as exc:  # one claim's failure must not hide the others' answers
            log.exception("preparing claim %s/%s", claim.namespace, claim.name)
            entry.error = f"claim {claim.namespace}/{claim.name}: {exc}"
            continue
        for d in prepared.devices:
            entry.devices.append(
                pb.Device(
                    request_names=list(d.requests), pool_name=d.pool, device_name=d.device, cdi_device_ids=d.cdi_ids
                )
            )
    return response


def _unprepare_all(driver: DraDriver, pb: ModuleType, request: Any) -> Any:
    """NodeUnprepareResources for either API version: every claim gets an entry, even when empty."""
    response = pb.NodeUnprepareResourcesResponse()
    for claim in request.claims:
        entry = response.claims[claim.uid]
        try:
            driver.unprepare(ClaimRef(claim.namespace, claim.uid, claim.name))
        except Exception as exc:  # reported per claim, as the API asks
            log.exception("unpreparing claim %s/%s", claim.namespace, claim.name)
            entry.error = f"claim {claim.namespace}/{claim.name}: {exc}"
    return response


class _DraV1(v1_grpc.DRAPluginServicer):
    def __init__(self, driver: DraDriver) -> None:
        self._driver = driver

    async def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: Ctx
    ) -> v1.NodePrepareResourcesResponse:
        result: v1.NodePrepareResourcesResponse = await asyncio.to_thread(_prepare_all, self._driver, v1, request)
        return result

    async def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: Ctx
    ) -> v1.NodeUnprepareResourcesResponse:
        result: v1.NodeUnprepareResourcesResponse = await asyncio.to_thread(_unprepare_all, self._driver, v1, request)
        return result


class _DraV1beta1(v1beta1_grpc.DRAPluginServicer):
    def __init__(self, driver: DraDriver) -> None:
        self._driver = driver

    async def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: Ctx
    ) -> v1beta1.NodePrepareResourcesResponse:
        result: v1beta1.NodePrepareResourcesResponse = await asyncio.to_thread(
            _prepare_all, self._driver, v1beta1, request
        )
        return result

    async def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: Ctx
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        result: v1beta1.NodeUnprepareResourcesResponse = await asyncio.to_thread(
            _unprepare_all, self._driver, v1beta1, request
        )
        return result


class DraPluginServer:
    """Serves the plugin's two sockets for one ``DraDriver``; ``start``/``stop`` own them.

    ``services`` limits what GetInfo advertises (both versions are always served), e.g. to keep a
    kubelet on ``v1beta1.DRAPlugin`` during an upgrade.
    """

    def __init__(
        self,
        driver: DraDriver,
        *,
        registry_dir: Path = DEFAULT_REGISTRY_DIR,
        plugin_dir: Path = DEFAULT_PLUGIN_DIR,
        on_registration: Callable[[RegistrationState], None] | None = None,
        services: Sequence[str] = SUPPORTED_SERVICES,
    ) -> None:
        unknown = [s for s in services if s not in SUPPORTED_SERVICES]
        if unknown or not services:
            raise ValueError(f"DRA services {list(services)}: choose from {', '.join(SUPPORTED_SERVICES)}")
        self.driver = driver
        self.services = tuple(services)
        self.registration_socket = Path(registry_dir) / REGISTRATION_SOCKET
        self.endpoint = Path(plugin_dir) / ENDPOINT_SOCKET
        self.registration: RegistrationState | None = None
        self._on_registration = on_registration
        self._registered = asyncio.Event()
        self._servers: list[grpc.aio.Server] = []

    def notify(self, state: RegistrationState) -> None:
        """Record the kubelet's verdict (called by NotifyRegistrationStatus)."""
        self.registration = state
        if state.registered:
            log.info("registered with the kubelet as DRA driver %s", DRIVER)
        else:
            log.error("the kubelet refused DRA driver %s: %s", DRIVER, state.error)
        self._registered.set()
        if self._on_registration is not None:
            self._on_registration(state)

    async def wait_registered(self, timeout: float) -> RegistrationState:
        """Wait for the kubelet's NotifyRegistrationStatus; TimeoutError if it never comes."""
        async with asyncio.timeout(timeout):  # not wait_for: it can swallow a cancel on 3.11 (gh-86296)
            await self._registered.wait()
        assert self.registration is not None
        return self.registration

    async def start(self) -> None:
        """Serve the DRA endpoint first, then the registration socket (the kubelet dials in that order)."""
        endpoint = grpc.aio.server()
        v1_grpc.add_DRAPluginServicer_to_server(_DraV1(self.driver), endpoint)
        v1beta1_grpc.add_DRAPluginServicer_to_server(_DraV1beta1(self.driver), endpoint)
        await self._serve(endpoint, self.endpoint)
        registration = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(_Registration(self), registration)
        await self._serve(registration, self.registration_socket)

    async def _serve(self, server: grpc.aio.Server, socket: Path) -> None:
        socket.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            socket.unlink()  # a stale socket of a previous run
        server.add_insecure_port(f"unix://{socket}")
        await server.start()
        self._servers.append(server)

    async def stop(self) -> None:
        """Stop serving and remove the sockets, so the plugin watcher sees the plugin go."""
        for server in reversed(self._servers):
            await server.stop(0)
        self._servers.clear()
        for socket in (self.registration_socket, self.endpoint):
            with contextlib.suppress(FileNotFoundError):
                socket.unlink()
