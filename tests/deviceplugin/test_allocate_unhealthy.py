"""Allocate refuses ids the plugin itself reports Unhealthy (issue 15 defect 8): the kubelet
filters them, but a kubelet whose view lags the plugin's must not get a dead GPU either."""

from __future__ import annotations

import tempfile
from pathlib import Path

import grpc
import pytest

from gpuchain.api.config.v1.config import parse_config
from gpuchain.common.scratch import scratch_dir
from gpuchain.kubelet.node import start_sim_node

GPU = "nvidia.com/gpu"


async def test_allocate_of_an_unhealthy_id_is_failed_precondition_naming_it_and_why() -> None:
    node = await start_sim_node(config=parse_config("health: {recoveryQuietSeconds: 60}"))
    try:
        bad = node.backend.inventory().gpu(2).uuid
        good = node.backend.inventory().gpu(3).uuid
        node.backend.inject_xid(2, xid=79)
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 7})
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await node.kubelet.allocate_raw(GPU, [good, bad])
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        details = err.value.details() or ""
        assert bad in details and "XID 79" in details and good not in details
        assert (await node.kubelet.allocate_raw(GPU, [good])).container_responses[0].envs
    finally:
        await node.stop()


async def test_allocate_of_an_unhealthy_replica_is_refused_too() -> None:
    node = await start_sim_node(config=parse_config("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}"))
    try:
        node.backend.inject_xid(0, xid=48)
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable() == {GPU: 14})
        uuid = node.backend.inventory().gpu(0).uuid
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await node.kubelet.allocate_raw(GPU, [f"{uuid}::1"])
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    finally:
        await node.stop()


def test_scratch_sockets_go_under_tmpdir(tmp_path: Path, short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(short_dir))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    made = scratch_dir("gc-")
    assert made.parent == short_dir and oct(made.stat().st_mode & 0o777) == "0o700"
    long = tmp_path / ("x" * 80)
    long.mkdir()
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.setattr(tempfile, "tempdir", None)
    fallback = scratch_dir("gc-")
    fallback.rmdir()
    assert fallback.parent == Path("/tmp")


async def test_simulated_node_sockets_honour_tmpdir(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(short_dir))
    monkeypatch.setattr(tempfile, "tempdir", None)
    node = await start_sim_node()
    try:
        assert node.socket_dir.parent.parent == short_dir
    finally:
        await node.stop()
    assert list(short_dir.iterdir()) == []  # the node removed the directory it made
