"""`python -c` programs that run `gpuchain <agent>` and send SIGTERM to themselves during start-up.

The kubelet sends SIGTERM whenever it decides to, a pod deleted while it starts included. A real
SIGTERM at an exact moment of start-up cannot be timed from outside, so the program wraps one
start-up step (``module:Class.method``, sync or async) to raise the signal just before or just
after the step runs, then runs the CLI as ``python -m gpuchain`` does.
"""

from __future__ import annotations

from typing import Literal

_PROGRAM = """
import asyncio, importlib, os, signal, sys
from gpuchain.cli import main

module, _, attr = {target!r}.partition(":")
owner_name, _, method = attr.partition(".")
owner = getattr(importlib.import_module(module), owner_name)
original = getattr(owner, method)
when = {when!r}

def term():
    os.kill(os.getpid(), signal.SIGTERM)

if asyncio.iscoroutinefunction(original):
    async def wrapped(*args, **kwargs):
        if when == "before":
            term()
        result = await original(*args, **kwargs)
        if when == "after":
            term()
        return result
else:
    def wrapped(*args, **kwargs):
        if when == "before":
            term()
        result = original(*args, **kwargs)
        if when == "after":
            term()
        return result

setattr(owner, method, wrapped)
sys.argv = ["gpuchain", *sys.argv[1:]]
main()
"""


def sigterm_during(target: str, when: Literal["before", "after"]) -> str:
    """The program for ``python -c``: SIGTERM just ``when`` the instance method ``target`` runs
    (``"gpuchain.dra.server:DraPluginServer.start"``); its arguments are the agent's command line."""
    return _PROGRAM.format(target=target, when=when)
