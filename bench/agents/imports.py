"""Where each node agent's RSS goes: what every imported package costs, and what running adds.

Each agent runs as its real command (the one ``bench.agents.run`` idles, default intervals)
under an import hook that reads VmRSS before and after every module's load; a module's *self*
cost is its growth minus that of the modules it imported in turn, summed per package
(``gpuchain.<subpackage>`` for the project's own code). After ``--settle`` seconds the child
writes the table and the whole RSS; "running" is what the process holds beyond its imports
(heap, thread stacks, arenas). The floor, ``import grpc``, is measured the same way in the run.

The node agent with every role (``bench.agents.node``'s command) is measured the same way, named
``node-agent``, and with the device plugin role alone, ``node-agent-dp``; ``--agent node-agent``
measures the one named. Beside the imports each agent's resident memory is split by mapping
(``/proc/self/smaps``: each shared library, the main heap, anonymous memory) against the floor's:
what no import table shows, such as grpc's code pages first run when the agent serves and calls.

    .venv/bin/python -m bench.agents.imports [--settle 20] [--agent device-plugin ...] [--python PATH] [--json]

The agents run as ``bench.agents.node``'s do: under gpuchain's runtime dependencies alone
(``bench.agents.interpreter``), this tree's ``src`` first on the path.

Figures are RSS pages, so a package's cost includes the shared libraries it maps and touches.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.agents.interpreter import REPO, add_python_option, python_of, tree_env
from bench.agents.node import AGENT_NODE, node_agent_command
from bench.agents.run import AGENTS, agent_command, free_port, kube_api
from bench.procs import stop as stop_processes

NODE_AGENT = "node-agent"
NODE_AGENT_DP = "node-agent-dp"
"""The node agent with the device plugin role alone (``bench.agents.node``'s second figure)."""


def measure(name: str, cmd: list[str], root: Path, kubeconfig: Path, settle: float, python: str) -> dict[str, Any]:
    """One metered process run by ``python``: ``cmd`` is the agent's command line without the interpreter."""
    out = root / f"{name}.json"
    env = tree_env({**os.environ, "KUBECONFIG": str(kubeconfig)})
    env["PYTHONPATH"] += os.pathsep + str(REPO)  # the meter, bench.agents._meter (standard library only)
    argv = [python, "-m", "bench.agents._meter", str(out), str(settle), *cmd]
    log = (root / f"{out.stem}.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + settle + 60
        while not out.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited {proc.returncode}: {(root / f'{out.stem}.log').read_text()[-1500:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} wrote nothing")
            time.sleep(0.2)
        time.sleep(0.2)
        return dict(json.loads(out.read_text()))
    finally:
        stop_processes(proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settle", type=float, default=20.0, help="seconds of running before the table is taken")
    ap.add_argument(
        "--agent", action="append", choices=[*AGENTS, NODE_AGENT, NODE_AGENT_DP], help="only these agents (repeatable)"
    )
    ap.add_argument("--top", type=int, default=14, help="packages listed per agent")
    add_python_option(ap)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    python = python_of(args)
    root = Path(tempfile.mkdtemp(prefix="gcim-", dir="/tmp"))
    results: dict[str, dict[str, Any]] = {}
    try:
        with kube_api(root) as (kubeconfig, client):
            floor_cmd = ["-c", "import grpc, time\nwhile True: time.sleep(3600)"]
            results["floor"] = measure("floor", floor_cmd, root, kubeconfig, args.settle, python)
            client.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": AGENT_NODE, "labels": {}}})
            for agent in args.agent or [*AGENTS, NODE_AGENT, NODE_AGENT_DP]:
                if agent == NODE_AGENT:
                    cmd = node_agent_command(root, busy=False, port=free_port())[1:]
                elif agent == NODE_AGENT_DP:
                    cmd = node_agent_command(root, busy=False, port=free_port(), roles="device-plugin")[1:]
                else:
                    cmd = agent_command(agent, root, busy=False, port=free_port())[1:]
                results[agent] = measure(agent, cmd, root, kubeconfig, args.settle, python)
    finally:
        shutil.rmtree(root, ignore_errors=True)  # each measure() stopped its agent; kube_api stopped the API
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return
    floor = results["floor"]
    for name, r in results.items():
        end, start = r["end_kib"] / 1024, r["start_kib"] / 1024
        imported = sum(r["packages"].values()) / 1024
        running = end - start - imported
        ratio = r["end_kib"] / floor["end_kib"]
        head = f"{name}: RSS {end:.1f} MiB = {ratio:.2f}x floor"
        print(f"{head}; at start {start:.1f}, imports {imported:.1f}, running {running:+.1f}")
        if r is floor:
            continue
        beyond = {p: kib - floor["packages"].get(p, 0) for p, kib in r["packages"].items()}
        print(f"    beyond the floor's imports: {sum(beyond.values()) / 1024:.1f} MiB, of which")
        for pkg, kib in sorted(beyond.items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"    {pkg:<34}{kib / 1024:>6.1f} MiB  {r['modules'].get(pkg, 0):>4} modules")
        mapped = {m: kib - floor["mappings"].get(m, 0) for m, kib in r["mappings"].items()}
        print("    resident beyond the floor's, by mapping:")
        for mapping, kib in sorted(mapped.items(), key=lambda kv: -kv[1])[: args.top // 2]:
            print(f"    {mapping.split('.cpython-')[0]:<34}{kib / 1024:>6.1f} MiB")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"(settle {args.settle:.0f} s; load average {load}; every process run by {python})")


if __name__ == "__main__":
    main()
