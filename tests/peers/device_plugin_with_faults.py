"""``gpuchain device-plugin`` exactly as its command runs, with faults a test injects into its simulated GPUs.

    python device_plugin_with_faults.py FIFO DEVICE-PLUGIN-ARGS...

Each line written to the FIFO is one fault on the sim backend the command opened, as the
in-process tests inject them: ``xid INDEX XID`` (``SimBackend.inject_xid``) or ``recover INDEX``
(``SimBackend.recover_gpu``). They are applied from a thread of their own, as NVML's event thread
delivers them. Used where the plugin must run as a process of its own: on the real node.
"""

from __future__ import annotations

import sys
import threading

from gpuchain import cli
from gpuchain.commands import device_plugin
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.sim import SimBackend

opened: list[SimBackend] = []
_open = device_plugin.open_backend


def _recording(*args: object, **kwargs: object) -> GpuBackend:
    backend = _open(*args, **kwargs)  # type: ignore[arg-type]
    assert isinstance(backend, SimBackend), "faults are injected into simulated GPUs only (--backend sim)"
    opened.append(backend)
    return backend


def _faults(fifo: str) -> None:
    while True:
        with open(fifo) as lines:  # blocks until a writer opens it; ends when that writer closes it
            for line in lines:
                what, *args = line.split()
                if what == "xid":
                    opened[-1].inject_xid(int(args[0]), xid=int(args[1]))
                elif what == "recover":
                    opened[-1].recover_gpu(int(args[0]))
                else:
                    print(f"device_plugin_with_faults: unknown fault {line!r}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    device_plugin.open_backend = _recording  # type: ignore[assignment]
    threading.Thread(target=_faults, args=(sys.argv[1],), daemon=True).start()
    sys.argv = ["gpuchain", "device-plugin", *sys.argv[2:]]
    cli.main()
