"""The validator role: the node's ready files kept current, as the operator's init containers write them once.

``gpuchain validate driver|toolkit|plugin`` each check one link and write ``<link>-ready`` on
success; the operands' init containers wait for those files. In the node agent the checks run on
the shared backend every ``interval`` seconds: a link that passes has its file (re)written, a link
that fails has its file removed with every link above it (``ReadyFiles.clear``), so nothing
starts on stale evidence. ``plugin`` is checked only where the agent knows its Node. The CUDA link
needs a CUDA workload of its own and stays with ``gpuchain validate cuda``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gpuchain.agent.node import Node
from gpuchain.agent.settings import ValidatorSettings
from gpuchain.common.supervise import wait_event
from gpuchain.validator import CheckResult, ReadyFiles, check_driver, check_plugin, check_toolkit
from gpuchain.validator.ready import DEFAULT_DIR

log = logging.getLogger("gpuchain.validator")


def checks(settings: ValidatorSettings, node: Node) -> list[CheckResult]:
    """One pass over the links, bottom-up; the first failure ends the pass (the links above wait on it)."""
    passes: list[Callable[[], CheckResult]] = [
        lambda: check_driver(node.backend),
        lambda: check_toolkit(node.backend, settings.dev_dir),
    ]
    if node.name:
        name = node.name
        passes.append(lambda: check_plugin(node.cluster(), name))
    results = []
    for check in passes:
        result = check()
        results.append(result)
        if not result.ok:
            break
    return results


def record(files: ReadyFiles, *, results: list[CheckResult], simulated: bool, before: dict[str, bool]) -> None:
    """Write or clear each link's ready file; log a link whose verdict changed."""
    for result in results:
        if result.ok:
            files.write(result.link, {**result.details, "simulated": True} if simulated else result.details)
        else:
            files.clear(result.link)
        if before.get(result.link) != result.ok:
            level = logging.INFO if result.ok else logging.WARNING
            log.log(level, "%s: %s%s", result.link, "ok: " if result.ok else "", result.message)
            before[result.link] = result.ok


async def run(settings: ValidatorSettings, node: Node, stop: asyncio.Event, started: Callable[[], None]) -> None:
    """Validate every ``interval`` until ``stop``."""
    files = ReadyFiles(settings.directory or DEFAULT_DIR)
    seen: dict[str, bool] = {}
    first = True
    while not stop.is_set():
        results = await asyncio.to_thread(checks, settings, node)
        record(files, results=results, simulated=node.simulated, before=seen)
        if first:
            started()
            first = False
        await wait_event(stop, settings.interval)
