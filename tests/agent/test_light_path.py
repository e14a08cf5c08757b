"""The node agent's path never loads pydantic: its entry point, its flags and every role, running;
nor typer, from the ``gpuchain`` executable to the agent's flags.

pydantic (12.9 MiB with what it pulls in) stays for the operator, the simulator's scenarios and
the typer commands; a node agent needs none of it. No role, alone or with the others, scraped,
loads prometheus-client either (``LEFT_TO_OTHER_ROLES``): every metrics source writes gpuchain's
own families (``exporter.exposition``). Checked in a fresh interpreter: the test
process itself has long imported pydantic.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest

SUPERVISE = r"""
async def supervise(node, roles):
    # The node agent's supervision of `roles` on `node`, its metrics served, once every role is up
    # (or 20 s passed); `supervisor.stop_all()` stops the roles and lets go of the node.
    from gpuchain.agent.build import build
    from gpuchain.agent.supervisor import RoleMetrics, Supervisor

    node.share(asyncio.get_running_loop())
    supervisor = Supervisor([(name, lambda s=s: build(s, node)) for name, s in roles.items()])
    node.metrics.add("node-agent", RoleMetrics(supervisor))
    server = node.serve_metrics()
    stop = asyncio.Event()
    task = asyncio.create_task(supervisor.run(stop))

    async def stop_all():
        stop.set()
        await task
        await node.close()

    supervisor.stop_all = stop_all
    for _ in range(400):
        if all(r.up for r in supervisor.roles):
            break
        await asyncio.sleep(0.05)
    return supervisor, server
"""

PROGRAM = (
    r"""
import asyncio, shutil, sys, tempfile
from pathlib import Path

from gpuchain import entry  # the console entry point, as `gpuchain node-agent` starts
from gpuchain.commands import node_agent

args = node_agent.parser().parse_args(["--backend", "sim", "--memory-cluster"])
root = Path(tempfile.mkdtemp(prefix="gc-light-"))

from gpuchain.agent.build import ROLES
from gpuchain.agent.node import Node, open_gpus
from gpuchain.agent.settings import (
    DevicePluginSettings, DraPluginSettings, ExporterSettings, GfdSettings, GpuHealthSettings,
    MigManagerSettings, NodeSettings, ValidatorSettings,
)
from gpuchain.kube.memory import MemoryCluster

roles = {
    "device-plugin": DevicePluginSettings(socket_dir=root / "dp"),
    "gpu-health": GpuHealthSettings(resync=0.5),
    "exporter": ExporterSettings(interval=0.2),
    "gfd": GfdSettings(output_file=str(root / "gfd"), sleep_interval="1s", machine_type_file=str(root / "none")),
    "mig-manager": MigManagerSettings(),
    "dra-plugin": DraPluginSettings(
        registry_dir=root / "reg", plugin_dir=root / "plugin", cdi_dir=root / "cdi", state_dir=root / "state"
    ),
    "validator": ValidatorSettings(directory=root / "validations"),
}
assert set(roles) == set(ROLES)
"""
    + SUPERVISE
    + r"""

async def main():
    cluster = MemoryCluster([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {}}}])
    node = Node(open_gpus("sim", preset="h100-80gb-x8"), settings=NodeSettings(node_name="n", metrics_port=0), cluster=lambda: cluster)
    supervisor, _server = await supervise(node, roles)
    up = sorted(r.name for r in supervisor.roles if r.up)
    await supervisor.stop_all()
    print(",".join(up))
    print("pydantic" in sys.modules)


try:
    asyncio.run(main())
finally:
    shutil.rmtree(root)  # this script's scratch directory, with what its stopped roles left there
"""
)


def test_the_node_agent_runs_every_role_without_pydantic(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    up, loaded = proc.stdout.split()
    assert up == "device-plugin,dra-plugin,exporter,gfd,gpu-health,mig-manager,validator"
    assert loaded == "False"


def test_the_node_agent_command_itself_never_imports_pydantic_nor_typer() -> None:
    """As a pod starts it: `gpuchain node-agent --help` goes through the console entry point."""
    program = "import sys\nfrom gpuchain.entry import main\nsys.argv = ['gpuchain', 'node-agent', '--help']\n"
    program += (
        "try:\n    main()\nexcept SystemExit:\n    pass\nprint('pydantic' in sys.modules, 'typer' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "False False"
    assert "--roles" in proc.stdout


def test_a_node_agent_that_cannot_start_says_why_in_one_line() -> None:
    """fail() ends the agent as it ends a typer command; the argparse entry turns that into the exit status."""
    program = "import sys\nfrom gpuchain.entry import main\n"
    program += "sys.argv = ['gpuchain', 'node-agent', '--backend', 'nvml', '--preset', 'h100-80gb-x8']\nmain()"
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "--preset and --topology apply to --backend sim only" in proc.stderr
    assert "Traceback" not in proc.stderr


ROLE_MODULES = (
    "gpuchain.exporter.collector",
    "gpuchain.remediation",
    "gpuchain.discovery",
    "gpuchain.mig.manager",
    "gpuchain.dra",
    "gpuchain.validator",
)
"""What the other roles run on: none of it is loaded before the device plugin serves."""
NEVER = ("pydantic", "typer", "rich", "click", "prometheus_client")
NOT_BEFORE_SERVING = ("tempfile", "secrets", "ctypes.util")
"""Standard library the device plugin does not need to serve: tempfile is for writing files
(``common.files.atomic_write``, a holder's lock on the release board), secrets for an Event's name,
and ctypes.util runs ``ldconfig -p`` to find the C library the interpreter already runs on
(``common.dirwatch``)."""
GPUCHAIN_NOT_BEFORE_SERVING = (
    "gpuchain.gpu.nvmlrelease",
    "gpuchain.gpu.mps",
    "gpuchain.deviceplugin.mps",
    "gpuchain.gpu.probes",
    "gpuchain.gpu.simnvlink",
)
"""gpuchain's own modules the device plugin does not need to serve, each some dataclasses (~0.5 ms
apiece to create): the NVML release board, followed once the first role serves (its default
directory is resolved by ``open_board``, the inventory the plugin serves from is
``gpu.backend.SeenInventory``); MPS, loaded only for a resource shared through MPS; the health
probes' readings (and the simulator's clean NVLink counters), loaded by either backend with the
first health reading or burn-in."""


def test_the_node_agent_registers_its_device_plugin_before_loading_any_other_role(tmp_path: Path) -> None:
    """The real ``gpuchain node-agent`` with every role, under ``python -X importtime`` (as
    ``tests/test_cli_lazy.py`` reads a command's imports): its import lines and its log lines share
    stderr in the order they happened, so what was imported before the device plugin's "serving"
    line is what the kubelet waited for. Neither that nor the whole run, every role up and its
    metrics served, loads pydantic, typer, rich or prometheus-client; the other roles' modules come
    after, and so does what only writing files needs (``NOT_BEFORE_SERVING``), the NVML release
    board and MPS (``GPUCHAIN_NOT_BEFORE_SERVING``)."""
    cmd = [sys.executable, "-X", "importtime", "-m", "gpuchain", "node-agent", "--backend", "sim", "--memory-cluster"]
    cmd += ["--socket-dir", str(tmp_path / "dp"), "--metrics-address", "127.0.0.1", "--metrics-port", "0"]
    cmd += ["--output-file", str(tmp_path / "gfd"), "--validations-dir", str(tmp_path / "val")]
    cmd += ["--registry-dir", str(tmp_path / "reg"), "--plugin-dir", str(tmp_path / "plugin")]
    cmd += ["--cdi-dir", str(tmp_path / "cdi"), "--state-dir", str(tmp_path / "state")]
    cmd += ["--roles", "device-plugin,gpu-health,exporter,gfd,mig-manager,dra-plugin,validator"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    waiting = {"gpuchain.deviceplugin: serving", "gpuchain.dra: serving", "gpuchain.validator:", "gpuchain.exporter:"}
    waiting |= {"gpuchain.gpu-health:", "gpuchain.discovery", "gpuchain.mig:"}
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 90
        while waiting and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            waiting = {w for w in waiting if w not in line}
    finally:
        proc.terminate()
        _, rest = proc.communicate(timeout=60)
        lines += rest.splitlines()
    assert not waiting, "".join(lines[-40:])
    served = next(i for i, line in enumerate(lines) if "gpuchain.deviceplugin: serving" in line)
    before, whole = _imports(lines[:served]), _imports(lines)
    assert sorted(m for m in whole if m.split(".")[0] in NEVER) == []
    assert sorted(m for m in before if m.startswith(ROLE_MODULES)) == []
    assert sorted(m for m in before if m in NOT_BEFORE_SERVING + GPUCHAIN_NOT_BEFORE_SERVING) == []
    assert {"grpc", "gpuchain.deviceplugin.plugin"} <= before
    assert set(ROLE_MODULES) <= whole  # the run's list: every role did load its modules


def test_the_device_plugin_on_real_gpus_loads_neither_the_release_board_nor_mps_nor_the_probes() -> None:
    """What the node agent's first role imports on a node with real GPUs (the NVML backend, which
    the test above, on simulated GPUs, does not load), in a fresh interpreter."""
    program = "import sys\nimport gpuchain.gpu.nvml, gpuchain.agent.roles.device_plugin\n"
    program += f"print(sorted(set(sys.modules) & {set(GPUCHAIN_NOT_BEFORE_SERVING)!r}))"
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]"]


def _imports(lines: list[str]) -> set[str]:
    """The modules ``-X importtime`` lines name."""
    return {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:") and "|" in line}


SERVE_ALONE = (
    r"""
import asyncio, shutil, socket, sys, tempfile
from pathlib import Path

from gpuchain.agent.node import Node, open_gpus
from gpuchain.agent.settings import (
    DevicePluginSettings, DraPluginSettings, ExporterSettings, GpuHealthSettings, NodeSettings,
)

root = Path(tempfile.mkdtemp(prefix="gc-alone-"))
role, prefix, *left = sys.argv[1:]
SETTINGS = {
    "device-plugin": DevicePluginSettings(socket_dir=root / "dp"),
    "dra-plugin": DraPluginSettings(
        registry_dir=root / "reg", plugin_dir=root / "plugin", cdi_dir=root / "cdi", state_dir=root / "state"
    ),
    "gpu-health": GpuHealthSettings(resync=0.2, repair=True, repair_interval=0.2),
    "exporter": ExporterSettings(interval=0.2),
}


def scrape(port):
    # a bare socket: urllib and http.client would load email themselves
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()

"""
    + SUPERVISE
    + r"""

async def main():
    where = NodeSettings(metrics_address="127.0.0.1", metrics_port=0)
    if role == "device-plugin":  # no Node name: the device plugin alone reads nothing of the cluster
        node = Node(open_gpus("sim", preset="h100-80gb-x8"), settings=where)
    else:
        from gpuchain.kube.memory import MemoryCluster  # here: it names objects with uuid

        cluster = MemoryCluster([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {}}}])
        where = NodeSettings(node_name="n", metrics_address="127.0.0.1", metrics_port=0)
        node = Node(open_gpus("sim", preset="h100-80gb-x8"), settings=where, cluster=lambda: cluster)
    supervisor, server = await supervise(node, {role: SETTINGS[role]})
    body = await asyncio.to_thread(scrape, server.server_port)
    await supervisor.stop_all()
    print([line for line in body.splitlines() if line.startswith("gpuchain_node_agent_role_")])
    print(sorted({line.split("{")[0].split()[0] for line in body.splitlines() if line.startswith(prefix)}))
    print(sorted({m.split(".")[0] for m in sys.modules} & set(left)))


try:
    asyncio.run(main())
finally:
    shutil.rmtree(root)  # this script's scratch directory, with what its stopped roles left there
"""
)
LEFT_TO_OTHER_ROLES = ("prometheus_client", "email", "http", "wsgiref", "lightkube", "httpx2")
"""What a role alone, scraped, never loads: prometheus-client (its package brings an HTTP server,
urllib and email, 2.6 MiB; no role uses it) and the Kubernetes client (the device plugin has no
Node name; the others are given an in-memory cluster)."""


def _serve_alone(role: str, prefix: str, left: tuple[str, ...] = LEFT_TO_OTHER_ROLES) -> tuple[list[str], ...]:
    """``role`` alone in a fresh interpreter, its metrics scraped: the supervisor's samples for it, the
    names of the scraped samples that start with ``prefix`` (the role's own), and which of the
    packages ``left`` it loaded."""
    cmd = [sys.executable, "-c", SERVE_ALONE, role, prefix, *left]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    samples, own, loaded = (ast.literal_eval(line) for line in proc.stdout.splitlines()[-3:])
    return samples, own, loaded


DEVICE_PLUGIN_NEVER = ("yaml", "uuid", "platform", "hashlib")
"""What the device plugin alone, given no config file, never loads beside ``LEFT_TO_OTHER_ROLES``:
PyYAML (the XID table, the MIG catalog and the simulator's preset are read from ``gpu.shipped``),
and uuid, platform and hashlib (the simulator's UUIDs are ``common.uuid5``'s; uuid is imported where a
reset posts a request on the release board or a config names a device by UUID)."""


def test_the_device_plugin_alone_serves_and_is_scraped_without_prometheus_client_nor_pyyaml() -> None:
    """The node agent's own role metrics are gpuchain's families (``exporter.exposition.Family``),
    written as prometheus-client's were; nothing else on this path needs prometheus-client, nor
    what ``DEVICE_PLUGIN_NEVER`` names."""
    samples, _, loaded = _serve_alone(
        "device-plugin", "gpuchain_node_agent_role_", (*LEFT_TO_OTHER_ROLES, *DEVICE_PLUGIN_NEVER)
    )
    assert samples == [
        'gpuchain_node_agent_role_up{role="device-plugin"} 1.0',
        'gpuchain_node_agent_role_failures_total{role="device-plugin"} 0',
        'gpuchain_node_agent_role_failing{role="device-plugin"} 0.0',
    ]
    assert loaded == []


@pytest.mark.parametrize(
    ("role", "prefix", "families"),
    [
        (
            "dra-plugin",
            "gpuchain_dra_",
            {"gpuchain_dra_devices", "gpuchain_dra_prepare_seconds_bucket", "gpuchain_dra_unprepare_seconds_sum"},
        ),
        (
            "gpu-health",
            "gpuchain_gpu_repair_",
            {
                "gpuchain_gpu_repair_passes_total",
                "gpuchain_gpu_repair_gpus",
                "gpuchain_gpu_repair_duration_seconds_count",
            },
        ),
        (
            "exporter",
            "gpuchain_exporter_",
            {"gpuchain_exporter_scrape_errors_total", "gpuchain_exporter_nvml_released"},
        ),
    ],
)
def test_a_role_whose_own_metrics_are_scraped_loads_no_prometheus_client(
    role: str, prefix: str, families: set[str]
) -> None:
    """The DRA plugin's metrics (``dra.metrics``), the repair loop's (``remediation.loopagent``) and
    the exporter's (``exporter.collector``) are gpuchain's families too: served, and scraped, with no
    prometheus-client in the process."""
    samples, own, loaded = _serve_alone(role, prefix)
    assert f'gpuchain_node_agent_role_up{{role="{role}"}} 1.0' in samples
    assert families <= set(own)
    assert loaded == []


GC_PROGRAM = r"""
import gc, logging, os, signal, sys, tempfile, threading

root = tempfile.mkdtemp(prefix="gc-collect-")
seen = {}


class Seen(logging.Handler):
    # gc.isenabled() as the device plugin serves, and as a role started after it logs
    def emit(self, record):
        if record.name == "gpuchain.deviceplugin" and record.getMessage().startswith("serving"):
            seen.setdefault("device plugin serving", gc.isenabled())
        if record.name == "gpuchain.validator" and "validator" not in seen:
            seen["validator"] = gc.isenabled()
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()


logging.getLogger("gpuchain").addHandler(Seen())
sys.argv = ["gpuchain", "node-agent", "--backend", "sim", "--memory-cluster", "--roles", "device-plugin,validator"]
sys.argv += ["--socket-dir", root + "/dp", "--validations-dir", root + "/val", "--metrics-port", "0"]
sys.argv += ["--metrics-address", "127.0.0.1", "--nvml-release-dir", ""]
from gpuchain.entry import main

try:
    main()
except SystemExit as exc:
    print(exc.code, seen, gc.isenabled())
"""


def test_the_node_agent_collects_no_cycles_until_its_first_role_serves() -> None:
    """``gpuchain node-agent`` runs with the cyclic collector off from exec until the device plugin
    serves (its start-up's imports set off some hundred collections that find next to nothing), and
    on again for every role after (``agent.runtime.first_served``)."""
    proc = subprocess.run([sys.executable, "-c", GC_PROGRAM], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[-2] == "0 {'device plugin serving': False, 'validator': True} True"
