"""The DRA path on a simulated node: publish the ResourceSlice, register, prepare a claim, an XID.

It lives in the simulator beside the device plugin's demo (`sim.demo`) because it drives the DRA
plugin through the kubelet test double (``dra_peer``), which production code never imports.

Everything is real except the GPUs and the API server: the plugin serves gRPC on unix sockets in
a temporary directory, the kubelet's DRA peer registers it and calls NodePrepareResources /
NodeUnprepareResources, the slice goes through the ``Cluster`` port (an in-memory one), and the
CDI spec is written to disk. The scheduler's part (choosing devices for the claim) is played by
``claims.first_fit`` with the same intent as the example template ``two-gpus-same-numa`` (or
``mig-1g10gb`` on a node whose GPUs are all in MIG mode).

``run_dra_demo`` prints each step with rich when given a console and returns a JSON-able
transcript, so ``gpuchain dra-demo`` (and ``gpuchain demo --dra``) can print either.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuchain.common.scratch import scratch_dir
from gpuchain.dra import cdi
from gpuchain.dra.claims import allocation_status, attribute, first_fit, resource_claim
from gpuchain.dra.driver import DraDriver, DriverConfig
from gpuchain.dra.kinds import DRIVER, RESOURCE_CLAIM, RESOURCE_SLICE, device_class
from gpuchain.dra.server import DraPluginServer
from gpuchain.dra.slices import slice_name
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.xid import describe
from gpuchain.kube.allocator import DRA
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.objects import Obj
from gpuchain.kubelet.dra_peer import DraClaim, DraPeer

DEFAULT_PRESET = "h100-80gb-x8"
DEMO_XID = 48


def _device_table(resource_slice: Obj) -> Table:
    spec = resource_slice["spec"]
    pool = spec["pool"]
    table = Table(
        title=f"ResourceSlice {resource_slice['metadata']['name']} (pool {pool['name']}, generation "
        f"{pool['generation']})",
        title_justify="left",
    )
    for col in ("device", "type", "product", "MIG profile", "memory", "NUMA", "UUID"):
        table.add_column(col)
    for d in spec["devices"]:
        numa = attribute(d, "numaNode")
        table.add_row(
            d["name"],
            str(attribute(d, "type")),
            str(attribute(d, "productName")),
            str(attribute(d, "migProfile") or "-"),
            d["capacity"]["memory"]["value"],
            "-" if numa is None else str(numa),
            str(attribute(d, "uuid")),
        )
    return table


def _pick(resource_slice: Obj) -> tuple[str, str, list[str]]:
    """The demo claim: two whole GPUs sharing a NUMA node, else one MIG device (name, CEL, devices)."""
    devices = resource_slice["spec"]["devices"]
    by_numa: dict[Any, list[str]] = {}
    for d in devices:
        if attribute(d, "type") == "gpu":
            by_numa.setdefault(attribute(d, "numaNode"), []).append(d["name"])
    pair = next(
        (names[:2] for numa, names in sorted(by_numa.items(), key=str) if numa is not None and len(names) >= 2), None
    )
    if pair:
        return "two-gpus-same-numa", f"device.attributes['{DRIVER}'].type == 'gpu'", pair
    one = first_fit(resource_slice, count=1, predicate=lambda d: attribute(d, "type") == "mig")
    return "one-mig-slice", f"device.attributes['{DRIVER}'].type == 'mig'", one


def _step(text: str) -> Text:
    """One step of the transcript: ``> text``, plain data never read as markup."""
    return Text.assemble((">", "bold cyan"), " ", text)


async def run_dra_demo(preset: str = DEFAULT_PRESET, console: Console | None = None) -> dict[str, Any]:
    """Run the scenario on a simulated ``preset`` node; print to ``console`` when given."""
    out = console or Console(quiet=True)
    sim = SimBackend.from_preset(preset)
    node = sim.topology.node
    cluster = MemoryCluster([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}])
    cluster.create(device_class())
    root = scratch_dir("dra-demo-")
    transcript: dict[str, Any] = {"preset": preset, "node": node, "driver": DRIVER}
    config = DriverConfig(node=node, cdi_dir=root / "cdi", state_dir=root / "state", unlabelled=DRA)  # a DRA-only node
    driver = DraDriver(sim, cluster=cluster, config=config)
    server = DraPluginServer(driver, registry_dir=root / "plugins_registry", plugin_dir=root / "plugins" / DRIVER)
    peer = DraPeer(root / "plugins_registry")
    try:
        inv = sim.inventory()
        out.print(
            Text.assemble(
                ("gpuchain DRA demo", "bold"), f": node {node}, {len(inv.gpus)} GPUs, driver {inv.driver.version}"
            )
        )

        published = driver.publish()
        live = cluster.get(RESOURCE_SLICE, name=slice_name(node))
        transcript["publish"] = {"generation": published.generation, "devices": list(published.devices)}
        transcript["resourceSlice"] = live
        out.print(_step(f"published {len(published.devices)} devices for driver {DRIVER}"))
        out.print(_device_table(live))

        await server.start()
        plugin = await peer.wait_for(DRIVER)
        state = await server.wait_registered(timeout=5)
        transcript["registration"] = {
            "socket": str(server.registration_socket),
            "endpoint": plugin.endpoint,
            "service": plugin.service,
            "registered": state.registered,
        }
        out.print(
            _step(
                f"kubelet plugin watcher found {server.registration_socket.name}: "
                f"type DRAPlugin, speaking {plugin.service} on {plugin.endpoint}"
            )
        )

        template, cel, chosen = _pick(live)
        claim = resource_claim("demo-claim", namespace="default", request="gpu", count=len(chosen), cel=cel)
        created = cluster.create(claim)
        cluster.patch_status(
            RESOURCE_CLAIM,
            name="demo-claim",
            status=allocation_status(node, [("gpu", d) for d in chosen]),
            namespace="default",
        )
        ref = DraClaim("default", created["metadata"]["uid"], "demo-claim")
        transcript["claim"] = {"name": ref.name, "uid": ref.uid, "like": template, "allocated": chosen}
        out.print(_step(f"scheduler allocated {', '.join(chosen)} to claim default/demo-claim ({template})"))

        result = (await peer.prepare(DRIVER, [ref]))[ref.uid]
        again = (await peer.prepare(DRIVER, [ref]))[ref.uid]
        spec_file = cdi.spec_path(driver.config.cdi_dir, ref.uid)
        spec = json.loads(spec_file.read_text())
        transcript["prepare"] = {
            "error": result.error,
            "devices": [{"device": d.device, "pool": d.pool, "cdiIds": list(d.cdi_ids)} for d in result.devices],
            "idempotent": again == result,
            "cdiSpec": spec,
        }
        out.print(
            _step(
                "NodePrepareResources (twice, same answer: "
                f"{'yes' if again == result else 'NO'}); CDI spec {spec_file.name}:"
            )
        )
        for d in result.devices:
            out.print(Text.assemble(f"  {d.device} -> ", (", ".join(d.cdi_ids), "bold")))
        out.print(Text(f"  env {spec['containerEdits']['env'][0]}"))

        victim = next(n for n in published.devices if n not in chosen)
        uuid = str(next(attribute(d, "uuid") for d in live["spec"]["devices"] if d["name"] == victim))
        after = driver.on_event(sim.inject_xid(uuid, xid=DEMO_XID))  # a GPU or a MIG UUID: that device only
        if after is None:
            raise RuntimeError(f"XID {DEMO_XID} on {victim} did not withdraw it: check the health policy")
        transcript["xid"] = {
            "xid": DEMO_XID,
            "meaning": describe(DEMO_XID).meaning,
            "device": victim,
            "generation": after.generation,
            "devices": len(after.devices),
            "withdrawn": victim not in after.devices,
        }
        out.print(
            _step(
                f"XID {DEMO_XID} ({describe(DEMO_XID).meaning}) on {victim}: withdrawn, pool "
                f"generation {published.generation} -> {after.generation}, {len(after.devices)} devices left"
            )
        )

        first = await peer.unprepare(DRIVER, [ref])
        second = await peer.unprepare(DRIVER, [ref])
        transcript["unprepare"] = {
            "errors": [first[ref.uid], second[ref.uid]],
            "cdiSpecRemoved": not spec_file.exists(),
        }
        out.print(
            _step(
                "NodeUnprepareResources twice: "
                f"{'ok' if not (first[ref.uid] or second[ref.uid]) else 'errors'}, CDI spec removed: "
                f"{'yes' if not spec_file.exists() else 'NO'}"
            )
        )
        return transcript
    finally:
        await peer.close()
        await server.stop()
        shutil.rmtree(root, ignore_errors=True)
