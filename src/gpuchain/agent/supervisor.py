"""The node agent's supervision tree: each role restarted alone, the others serving on.

A separate agent that fails exits, and the kubelet restarts its container. Roles that share a
process cannot work that way: one crashing role would take the device plugin down with it. So the
supervisor keeps each role in a loop of its own:

- a role that raises (or returns before it was stopped) is logged, with its traceback unless it
  is a ``RoleError`` (a config that cannot be used: one line), and built again from its settings
  after a jittered backoff (``common.supervise.Backoff``) that doubles from ``first_delay`` to
  ``max_delay``; a run longer than ``max_delay`` counts as healthy and starts the backoff over;
- repeated failure is visible: from ``REPEATED`` failures in a row each restart logs an error
  that says so, and ``RoleMetrics`` serves per role ``gpuchain_node_agent_role_up``,
  ``gpuchain_node_agent_role_failures_total`` and ``gpuchain_node_agent_role_failing`` (1 from
  the ``REPEATED``-th failure in a row until the role has served ``max_delay`` seconds again);
- start-up is ordered: the first role (the device plugin, ``build.ROLES``) is started alone and
  the others (and ``after_first``: the node agent's metrics endpoint) only once it serves (or
  failed, or ``first_wait`` passed), so a node's GPUs reach the kubelet before the other roles'
  imports and first passes; once every role served (or ``settle_after`` passed) the start-up
  heap is frozen (``runtime.settled``);
- stopping sets every role's stop event and waits for them to clean up (``stop_timeout``, after
  which a role is cancelled).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuchain.agent.build import Role
from gpuchain.agent.node import RoleError
from gpuchain.agent.runtime import settled
from gpuchain.common.supervise import Backoff, cancel_and_wait, wait_event

if TYPE_CHECKING:
    from gpuchain.exporter.exposition import Family

log = logging.getLogger("gpuchain.node-agent")

REPEATED = 3
"""Failures in a row from which a role is reported as failing."""


@dataclass(kw_only=True)
class RoleState:
    """What the supervisor knows of one role."""

    name: str
    build: Callable[[], Role]
    up: bool = False
    failures: int = 0
    in_a_row: int = 0
    last_error: str = ""
    began: float = 0.0
    """When its current run began (the supervisor's clock)."""
    served: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the role served, or failed, for the first time: start-up goes on."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)


class Supervisor:
    """Runs roles (name and builder, in start order) until ``stop``; see the module docstring."""

    def __init__(
        self,
        roles: Sequence[tuple[str, Callable[[], Role]]],
        *,
        first_delay: float = 1.0,
        max_delay: float = 60.0,
        first_wait: float = 30.0,
        settle_after: float = 60.0,
        stop_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        after_first: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.roles = [RoleState(name=name, build=build) for name, build in roles]
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.first_wait = first_wait
        self.settle_after = settle_after
        self.stop_timeout = stop_timeout
        self._clock = clock
        self.after_first = after_first
        """Run once the first role serves (or failed), before the others start: what the agent
        does not need for its first role (the metrics endpoint) waits until then."""
        self._stopping = asyncio.Event()
        self.changes = 0
        """Bumped on every change of a role's state (the metrics' generation)."""

    def role(self, name: str) -> RoleState:
        return next(r for r in self.roles if r.name == name)

    def failing(self, state: RoleState) -> bool:
        """``REPEATED`` failures in a row, and not serving for longer than ``max_delay`` since."""
        healthy_again = state.up and self._clock() - state.began > self.max_delay
        return state.in_a_row >= REPEATED and not healthy_again

    async def run(self, stop: asyncio.Event) -> None:
        """Start the roles in order, keep them up until ``stop``, then stop them all."""
        tasks: list[asyncio.Task[None]] = []
        try:
            for i, state in enumerate(self.roles):
                if stop.is_set():
                    break
                tasks.append(asyncio.create_task(self._keep(state), name=f"role {state.name}"))
                if i == 0:
                    if len(self.roles) > 1 or self.after_first is not None:
                        await _first_of((state.served, stop), self.first_wait)
                    if self.after_first is not None and not stop.is_set():
                        await self.after_first()
            settling = asyncio.create_task(self._settle())
            await stop.wait()
            settling.cancel()
        finally:
            await self._stop_all(tasks)

    async def _settle(self) -> None:
        waits = [asyncio.ensure_future(r.served.wait()) for r in self.roles]
        try:
            await asyncio.wait(waits, timeout=self.settle_after)
        finally:
            for w in waits:
                w.cancel()
        settled()

    async def _stop_all(self, tasks: list[asyncio.Task[None]]) -> None:
        self._stopping.set()
        for state in self.roles:
            state.stop.set()
        if not tasks:
            return
        _done, pending = await asyncio.wait(tasks, timeout=self.stop_timeout)
        for task in pending:
            log.error("%s did not stop within %.0f s; cancelling it", task.get_name(), self.stop_timeout)
        await cancel_and_wait(*pending)

    def _started(self, state: RoleState) -> None:
        state.up = True
        state.served.set()
        self.changes += 1
        if state.in_a_row:
            log.info("role %s serves again after %d failures in a row", state.name, state.in_a_row)

    async def _keep(self, state: RoleState) -> None:
        """One role, for ever: run it, and after a failure run it again (built afresh) after a backoff."""
        backoff = Backoff(self.first_delay, cap=self.max_delay)
        while not self._stopping.is_set():
            state.stop = asyncio.Event()
            began = state.began = self._clock()
            try:
                role = state.build()
                await role(state.stop, lambda: self._started(state))
                if state.stop.is_set():
                    return
                raise RuntimeError("it ended although it should run until stopped")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                ran = self._clock() - began
                if ran > backoff.cap:  # it served a good while: a new fault, not the old one again
                    backoff.reset()
                    state.in_a_row = 0
                wait = backoff.next()
                state.up = False
                state.failures += 1
                state.in_a_row += 1
                state.last_error = str(exc) or type(exc).__name__
                state.served.set()
                self.changes += 1
                again = f"; restarting it in {wait:.1f} s"
                if self.failing(state):
                    again += f" (failed {state.in_a_row} times in a row; the other roles keep serving)"
                if isinstance(exc, RoleError):
                    log.error("role %s cannot start: %s%s", state.name, exc, again)
                else:
                    log.error("role %s failed%s", state.name, again, exc_info=exc)
            await wait_event(self._stopping, wait)


async def _first_of(events: Sequence[asyncio.Event], timeout: float) -> None:
    """Wait until one of ``events`` is set, or ``timeout`` seconds."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


class RoleMetrics:
    """The supervisor's view of each role, as metrics on the node agent's endpoint (a ``MetricsSource``)."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor

    @property
    def registry(self) -> RoleMetrics:
        return self

    @property
    def generation(self) -> int:
        return self.supervisor.changes

    def health(self) -> tuple[bool, str]:
        failing = [r.name for r in self.supervisor.roles if self.supervisor.failing(r)]
        if failing:
            return False, f"failing: {', '.join(failing)}"
        return True, "every role serves" if all(r.up for r in self.supervisor.roles) else "starting"

    def collect(self) -> Iterator[Family]:
        # gpuchain's own families: a device plugin alone loads no prometheus-client (see exporter.exposition).
        from gpuchain.exporter.exposition import Family, Sample

        roles = self.supervisor.roles
        up = "gpuchain_node_agent_role_up"
        failures = "gpuchain_node_agent_role_failures"
        failing = "gpuchain_node_agent_role_failing"
        yield Family(
            up, "1 while the role serves.", "gauge", [Sample(up, {"role": r.name}, 1.0 if r.up else 0.0) for r in roles]
        )
        yield Family(
            failures,
            "Times the role failed and was restarted.",
            "counter",
            [Sample(failures + "_total", {"role": r.name}, r.failures) for r in roles],
        )
        yield Family(
            failing,
            f"1 from the role's {REPEATED}th failure in a row until it has served"
            f" {self.supervisor.max_delay:g} s again.",
            "gauge",
            [Sample(failing, {"role": r.name}, 1.0 if self.supervisor.failing(r) else 0.0) for r in roles],
        )
