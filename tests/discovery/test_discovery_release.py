"""Feature discovery while it has let go of NVML for a GPU reset on its node (``gpu.nvmlrelease``):
a pass labels from the GPUs seen before, so no label disappears for the reset."""

from __future__ import annotations

from fakes.releasable import ReleasableView

from gpuchain.api.config.v1.config import parse_config
from gpuchain.discovery.labels import Labels
from gpuchain.discovery.service import Discovery
from gpuchain.gpu.sim import SimBackend


def test_a_pass_while_released_writes_the_same_labels() -> None:
    view = ReleasableView(SimBackend.from_preset("h100-80gb-x8"))
    seen: list[Labels] = []
    discovery = Discovery(backend=view, config=parse_config(""), sinks=[seen.append], clock=lambda: 42.0)
    first = discovery.run_once()
    assert first["nvidia.com/gpu.count"] == "8"
    view.release()
    assert discovery.run_once() == first
    assert view.reads_while_released == 1 and len(seen) == 2
