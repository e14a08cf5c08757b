"""A plugin stopped while it registers with the kubelet stops, even when gRPC reports the cancel
as an RPC error (seen as a 300 s hang of a relabelling test on a slow CI machine)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from gpuchain.deviceplugin import plugin as plugin_module
from gpuchain.kubelet.node import start_sim_node
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as pb
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

REGISTRATION_STUB = pb_grpc.RegistrationStub


class _AnswerCrossesCancel:
    """The Registration stub, over the real channel, when the kubelet's answer and the caller's
    cancel cross: grpc.aio's unary call then catches the CancelledError and reports the call's
    status (``_invoke`` in grpc/aio/_call.py, grpcio 1.6x-1.8x), here OK, as an ``AioRpcError``."""

    registering = asyncio.Event()
    hold = False

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.real = REGISTRATION_STUB(channel)

    async def Register(self, request: pb.RegisterRequest, **kwargs: Any) -> pb.Empty:
        if not _AnswerCrossesCancel.hold:
            return await self.real.Register(request, **kwargs)
        _AnswerCrossesCancel.registering.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise grpc.aio.AioRpcError(grpc.StatusCode.OK, grpc.aio.Metadata(), grpc.aio.Metadata()) from None
        raise AssertionError("unreachable: the wait above only ends by a cancel")


@pytest.mark.timeout(30)  # without the fix the kubelet watch never ends, not even at the loop's teardown
async def test_stop_during_a_reregistration_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_AnswerCrossesCancel, "registering", asyncio.Event())
    monkeypatch.setattr(plugin_module.pb_grpc, "RegistrationStub", _AnswerCrossesCancel)
    node = await start_sim_node()
    try:
        monkeypatch.setattr(_AnswerCrossesCancel, "hold", True)
        await node.kubelet.restart()  # the plugin's kubelet watch re-registers, and is held there
        async with asyncio.timeout(10):
            await _AnswerCrossesCancel.registering.wait()
        async with asyncio.timeout(5):
            await node.plugin.stop()
    finally:
        await node.kubelet.stop()
        node.backend.close()
