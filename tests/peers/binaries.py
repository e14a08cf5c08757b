"""Where scripts/build-peers put the real peers, and why one is missing (the skip reason).

Each Go module under tests/peers has its own cache directory, keyed by the hash of its go.mod + go.sum
(+ ldflags for the Kubernetes module), computed here exactly as scripts/build-peers computes it, so a
pinned version change is a new directory, never a stale binary: tests/peers/go.mod pins Kubernetes and
etcd, tests/peers/nvidia/go.mod NVIDIA's device plugin config package (with the peer's own main.go),
tests/peers/nvidia-plugin NVIDIA's device plugin and GFD v0.18.0 on go-nvml's DGX A100 mock (its recipe:
the source patch and the mock's wrapper),
tests/peers/containerd/go.mod containerd v2 (with the real node's pause program and image maker),
tests/peers/mock-nvml go-nvml's DGX A100 mock as a ``libnvidia-ml.so.1`` (its build script and module).
When ``GPUCHAIN_REQUIRE_PEERS=1`` (scripts/test sets it after building), a peer that is neither
built nor recorded as unbuildable is an error, not a skip: CI must not go green by skipping.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

PEERS = Path(__file__).resolve().parent


_CONTAINERD = ("containerd/go.mod", "containerd/go.sum", "containerd/pause/main.go", "containerd/oci_image.py")
MODULES = {
    "nvidia-dp-config": ("nvidia/go.mod", "nvidia/go.sum", "nvidia/main.go"),
    **{
        name: ("nvidia-plugin/prepare", "nvidia-plugin/mock_nvml.go")
        for name in ("nvidia-device-plugin-dgxa100", "gpu-feature-discovery-dgxa100")
    },
    **{
        name: _CONTAINERD
        for name in ("containerd", "ctr", "containerd-shim-runc-v2", "pause.oci.tar", "busybox.oci.tar")
    },
    "libnvidia-ml.so.1": ("mock-nvml/build", "mock-nvml/go.mod", "mock-nvml/go.sum", "mock-nvml/main.go"),
}
"""Peers built from a module other than tests/peers/go.mod, and the files their cache is keyed by."""


def cache_root(recipe_files: tuple[str, ...] = ("go.mod", "go.sum", "ldflags")) -> Path:
    """The cache directory of the module whose pins are ``recipe_files`` (it may not exist yet)."""
    recipe = b"".join((PEERS / name).read_bytes() for name in recipe_files)
    digest = hashlib.sha256(recipe).hexdigest()[:16]
    base = os.environ.get("GPUCHAIN_PEERS_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuchain-peers"
    )
    return Path(base) / digest


def peer_path(name: str) -> Path:
    """Where scripts/build-peers puts the peer ``name`` (it may not be built)."""
    return cache_root(*([MODULES[name]] if name in MODULES else [])) / "bin" / name


def peer_or_skip(name: str) -> Path:
    """The built binary ``name``, or skip naming why it is not there (fail in CI if merely unbuilt)."""
    binary = peer_path(name)
    root = binary.parent.parent
    if binary.is_file() and (name.endswith(".tar") or os.access(binary, os.X_OK)):  # an image archive is no program
        return binary
    failed = root / "failed" / name
    if failed.is_file():
        pytest.skip(f"peer {name} could not be built from its published module: {failed.read_text().strip()}")
    if os.environ.get("GPUCHAIN_REQUIRE_PEERS") == "1":
        pytest.fail(f"peer {name} is neither built nor recorded as unbuildable in {root}; run scripts/build-peers")
    pytest.skip(f"peer {name} is not built in {root}: run scripts/build-peers")
