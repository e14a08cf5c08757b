"""The simulator: scenario YAML -> a simulated cluster (MemoryCluster + kubelet peer + SimBackend).

from gpuchain.sim import load_scenario, build, go_live
sim = build(load_scenario("friday-scale-out"))   # synthetic, fast (rendered objects)
await go_live(sim)                               # device plugin + kubelet peer over gRPC
sim.cluster.list(NODE)                           # what kubectl would show
"""

from __future__ import annotations

from gpuchain.sim.build import LiveNode, SimCluster, build, go_live
from gpuchain.sim.scenario import NodeGroup, Scenario, Workload, load_scenario, parse_scenario, scenario_names

__all__ = [
    "LiveNode",
    "NodeGroup",
    "Scenario",
    "SimCluster",
    "Workload",
    "build",
    "go_live",
    "load_scenario",
    "parse_scenario",
    "scenario_names",
]
