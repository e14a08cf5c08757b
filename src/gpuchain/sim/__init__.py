"""The simulator: scenario YAML -> a simulated cluster (MemoryCluster + kubelet peer + SimBackend).

from gpuchain.sim import load_scenario, build, go_live
sim = build(load_scenario("friday-scale-out"))   # synthetic, fast (rendered objects)
await go_live(sim)                               # device plugin + kubelet peer over gRPC
sim.cluster.list(NODE)                           # what kubectl would show

Everything simulated lives here; the layers it simulates never import it. Scenario clusters:
``scenario`` (the YAML), ``chain`` (each node's chain, planned), ``render`` with ``shapes``,
``nodes``, ``workloads``, ``operand_logs`` and ``clusterpolicy`` (the objects), ``stacks`` (each
stack's names), ``build`` (the cluster, optionally live), ``testpod`` and ``usage``. The demos:
``demo`` (`gpuchain demo`) and ``dra_demo`` (`gpuchain dra-demo`). GPU health: ``remediation``
(the remediator's scenarios and ``gpu-health --dry-run``'s Node) and ``repair`` (the repair loop's
scenarios over simulated time, `gpuchain sim run gpu-reset`).
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
