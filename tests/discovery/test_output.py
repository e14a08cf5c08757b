"""Outputs: the NFD feature file (atomic replace) and node labels patched through MemoryCluster."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuchain.api.config.v1.config import parse_config
from gpuchain.discovery.labels import gfd_labels
from gpuchain.discovery.output import label_patch, patch_node_labels, render_feature_file, write_feature_file
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import NODE, MemoryCluster
from gpuchain.kube.objects import labels_of


def test_feature_file_format_and_replace(tmp_path: Path) -> None:
    target = tmp_path / "features.d" / "gfd"
    write_feature_file(target, {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    assert target.read_text() == "nvidia.com/gpu.count=8\nnvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\n"
    write_feature_file(target, {"nvidia.com/gpu.count": "7"})
    assert target.read_text() == "nvidia.com/gpu.count=7\n"
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)
    assert os.listdir(target.parent) == ["gfd"]


def test_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "gfd"
    write_feature_file(target, {"nvidia.com/gpu.count": "8"})

    def broken_replace(src: str, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space"):
        write_feature_file(target, {"nvidia.com/gpu.count": "0"})
    assert target.read_text() == "nvidia.com/gpu.count=8\n"
    assert os.listdir(tmp_path) == ["gfd"]


def test_render_feature_file_is_key_value_lines() -> None:
    assert render_feature_file({}) == ""
    assert render_feature_file({"a": "1", "b": ""}) == "a=1\nb=\n"


def test_label_patch_removes_only_owned_stale_labels() -> None:
    current = {
        "nvidia.com/gpu.count": "8",
        "nvidia.com/mig-3g.40gb.count": "4",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/mig.config": "all-balanced",
        "kubernetes.io/hostname": "node-1",
    }
    desired = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert label_patch(current, desired) == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/mig-3g.40gb.count": None,
        "nvidia.com/mig.strategy": None,
    }
    assert label_patch({**current, **desired}, {**current, **desired}) == {}


def _node(labels: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1", "labels": labels}}


def test_patch_node_after_switching_from_mixed_to_none() -> None:
    inventory = SimBackend.from_preset("h100-80gb-x8-mig-mixed").inventory()
    mixed = gfd_labels(inventory, config=parse_config("flags: {migStrategy: mixed}"), timestamp=1)
    others = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.driver": "true", "team": "ml"}
    cluster = MemoryCluster([_node({**others, **mixed})])

    none = gfd_labels(inventory, config=parse_config(""), timestamp=1)
    patch_node_labels(cluster, node="gpu-node-1", labels=none)

    live = labels_of(cluster.get(NODE, name="gpu-node-1"))
    assert live == {**others, **none}
    assert not any(k.startswith("nvidia.com/mig-") for k in live)
    assert "nvidia.com/mig.strategy" not in live


def test_patch_node_in_sync_makes_no_write() -> None:
    labels = gfd_labels(SimBackend.from_preset("l4-x2").inventory(), config=parse_config(""), timestamp=1)
    cluster = MemoryCluster([_node({"team": "ml"})])
    patch_node_labels(cluster, node="gpu-node-1", labels=labels)
    assert cluster.calls.writes == 1
    cluster.calls.reset()
    assert patch_node_labels(cluster, node="gpu-node-1", labels=labels) == {}
    assert cluster.calls.writes == 0
