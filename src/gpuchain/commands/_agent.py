"""The option every node agent command shares: the node's NVML release board (``gpu.nvmlrelease``).

What an agent does around its start-up (stop signals, the settled heap, following the board)
lives in the agent layer (``gpuchain.agent.runtime``), shared with ``gpuchain node-agent``.
"""

from __future__ import annotations

from typing import Any

import typer


def nvml_release_dir_option() -> Any:
    """``--nvml-release-dir``: the node's NVML release board (the chart's hostPath), '' for none."""
    from gpuchain.gpu.nvmlrelease import DEFAULT_DIR, ENV_VAR

    return typer.Option(
        str(DEFAULT_DIR),
        "--nvml-release-dir",
        envvar=ENV_VAR,
        help="The node's NVML release board, a directory shared by gpuchain's pods: while gpu-health resets a "
        "GPU this agent lets go of NVML (the driver refuses a reset while any process holds it). "
        "'' turns it off; a missing directory is logged once and the agent runs without it.",
    )
