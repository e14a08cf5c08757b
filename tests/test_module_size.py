"""No hand-written module under src/gpuchain is over 800 lines: one that grows past that holds more
than one job, and is split by job into modules of its package (as ``dra.driver`` was into
``dra.publishing`` and ``dra.instances``). The protobuf stubs ``protoc`` generates (``*_pb2*``) are
not written by hand and are left out."""

from __future__ import annotations

from test_import_graph import SRC

LIMIT = 800


def test_no_hand_written_module_is_over_800_lines() -> None:
    counts = {
        path.relative_to(SRC).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted((SRC / "gpuchain").rglob("*.py"))
        if "_pb2" not in path.name
    }
    assert len(counts) > 100  # the walk found the package
    over = {path: n for path, n in counts.items() if n > LIMIT}
    assert not over, f"modules over {LIMIT} lines (split them by job): " + ", ".join(
        f"{path} ({n})" for path, n in over.items()
    )
