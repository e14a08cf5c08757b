"""The ``gpuchain`` executable (and ``python -m gpuchain``): ``node-agent`` goes straight to the
node agent, every other command to the typer CLI (``gpuchain.cli``).

The node agent is a GPU node's light path: it parses its own flags (argparse) and never imports
typer (1.6 MiB of RSS and some 19 ms of import before the device plugin can register, on top of
what the agent imports anyway) nor pydantic, which typer runs every option through. Before any
of its threads starts, it holds glibc's allocator to two arenas (``agent.runtime.cap_malloc_arenas``).
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["node-agent"]:
        import gc

        gc.disable()  # until its first role serves (``agent.runtime.first_served``)
        from gpuchain.agent.runtime import cap_malloc_arenas

        cap_malloc_arenas()  # before the first thread: each would keep an arena of its own
        from gpuchain.commands.node_agent import main as node_agent

        sys.exit(node_agent(sys.argv[2:]))
    from gpuchain.cli import main as cli

    cli()
