"""The node agent holds glibc's allocator to two arenas (``agent.runtime.cap_malloc_arenas``), so
its threads (grpc's and its own) share one instead of each keeping its own for the life of the
process. Checked in a fresh interpreter, whose threads have made no arenas yet, by counting the
heaps glibc itself reports (``malloc_info``) after several threads allocated at once.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from gpuchain.agent.runtime import MALLOC_ARENAS

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="per-thread arenas are glibc's; another C library has none to cap"
)

PROGRAM = r"""
import ctypes, sys, threading

MODE, OUT = sys.argv[1:3]
THREADS = 6
together = threading.Barrier(THREADS)

def allocate():
    held = [bytearray(4096) for _ in range(64)]  # above pymalloc's 512 bytes: the C allocator's
    together.wait()  # every thread holds its blocks at once, so none hands its arena on

def threads_then_report(argv=()):
    threads = [threading.Thread(target=allocate) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    report = libc.fopen(OUT.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(report))
    libc.fclose(ctypes.c_void_p(report))
    return 0

if MODE == "node-agent":
    # `gpuchain node-agent` as its executable starts it, with the threads in place of the agent
    from gpuchain.commands import node_agent
    from gpuchain.entry import main

    node_agent.main = threads_then_report
    sys.argv = ["gpuchain", "node-agent"]
    try:
        main()
    except SystemExit as exit:
        assert exit.code == 0, exit.code
else:
    threads_then_report()
"""


def heaps(tmp_path: Path, mode: str) -> int:
    """The arenas glibc reports in a fresh interpreter after six threads allocated at once."""
    out = tmp_path / f"{mode}.xml"
    subprocess.run([sys.executable, "-c", PROGRAM, mode, str(out)], check=True, timeout=60)
    return out.read_text().count("<heap nr=")


def test_the_node_agent_threads_share_one_arena(tmp_path: Path) -> None:
    assert heaps(tmp_path, "node-agent") <= MALLOC_ARENAS
    # The same threads without the cap: one arena each, beside the main thread's.
    assert heaps(tmp_path, "default") > MALLOC_ARENAS
