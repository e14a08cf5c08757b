"""The node agent's supervisor: a failed role is built again alone; failing is reported, then cleared."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable

from gpuchain.agent.build import Role
from gpuchain.agent.node import RoleError
from gpuchain.agent.supervisor import REPEATED, RoleMetrics, Supervisor


async def test_a_role_that_fails_then_serves_is_failing_only_until_it_has_served_a_while() -> None:
    builds = {"flaky": 0, "steady": 0}

    def builder(name: str) -> Callable[[], Role]:
        def build() -> Role:
            builds[name] += 1
            attempt = builds[name]

            async def run(stop: asyncio.Event, started: Callable[[], None]) -> None:
                if name == "flaky" and attempt <= REPEATED:
                    raise RoleError(f"config not there yet ({attempt})")
                started()
                await stop.wait()

            return run

        return build

    # "Serving a while" is read on a clock the test moves: on the real one, a loaded machine could
    # wake the loop below more than max_delay after the role came back, when it rightly is no
    # longer failing.
    now = [0.0]
    supervisor = Supervisor(
        [("steady", builder("steady")), ("flaky", builder("flaky"))],
        first_delay=0.01,
        max_delay=0.2,
        clock=lambda: now[0],
    )
    metrics = RoleMetrics(supervisor)
    stop = asyncio.Event()
    task = asyncio.create_task(supervisor.run(stop))
    try:
        flaky = supervisor.role("flaky")
        while not flaky.up:
            await asyncio.sleep(0.01)
        assert flaky.failures == REPEATED and supervisor.failing(flaky)  # serving again, not yet for long
        assert metrics.health() == (False, "failing: flaky")
        now[0] += 0.3  # longer than max_delay: healthy again
        assert not supervisor.failing(flaky)
        assert metrics.health() == (True, "every role serves")
        assert builds == {"steady": 1, "flaky": REPEATED + 1}  # the steady role was never rebuilt
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        gc.unfreeze()  # the supervisor froze the start-up heap, as an agent does


async def test_stop_waits_for_every_role_to_clean_up() -> None:
    cleaned: list[str] = []

    def build(name: str) -> Callable[[], Role]:
        async def run(stop: asyncio.Event, started: Callable[[], None]) -> None:
            started()
            try:
                await stop.wait()
            finally:
                await asyncio.sleep(0.05)  # a socket to remove, a feature file to take away
                cleaned.append(name)

        return lambda: run

    supervisor = Supervisor([(n, build(n)) for n in ("a", "b", "c")])
    stop = asyncio.Event()
    task = asyncio.create_task(supervisor.run(stop))
    while not all(r.up for r in supervisor.roles):
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 10)
    gc.unfreeze()
    assert sorted(cleaned) == ["a", "b", "c"]
    assert all(r.failures == 0 for r in supervisor.roles)
