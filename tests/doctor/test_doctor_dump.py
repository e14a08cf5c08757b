"""`gpuchain doctor --from-dump`: the directory kubectl cluster-info dump writes, read with no API.

The layout and the log headers are kubectl's (kubernetes/kubernetes
staging/src/k8s.io/kubectl/pkg/cmd/clusterinfo/clusterinfo_dump.go): nodes.json,
<ns>/{events,replication-controllers,services,daemonsets,deployments,replicasets,pods}.json as
List objects whose items carry no apiVersion/kind, <ns>/<pod>/logs.txt with
"==== START logs for container C of pod NS/P ====" ... "==== END logs for container C of pod NS/P ====".
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.doctor import LinkState, diagnose, run_doctor
from gpuchain.doctor.dump import DumpError, parse_logs, read_dump, write_dump
from gpuchain.sim import build, load_scenario, parse_scenario

runner = CliRunner()


def _strip_item_kinds(root: Path) -> None:
    """kubectl's Lists from typed clients carry apiVersion/kind on the List only, not on items
    (clusterpolicies.json is gpuchain's extra: its items keep their group, which tells the stack),
    and an empty List is ``"items": null`` (what the real kubectl v1.32 wrote in
    tests/peers/test_doctor_real_dump.py)."""
    for path in root.rglob("*.json"):
        if path.name == "clusterpolicies.json":
            continue
        data = json.loads(path.read_text())
        for item in data.get("items") or []:
            item.pop("apiVersion", None)
            item.pop("kind", None)
        if not data.get("items"):
            data["items"] = None
        path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "scenario",
    [
        "friday-scale-out",
        "gpu-fell-off-bus",
        "runtime-not-configured",
        "healthy-gpu-operator",
        "healthy-gke",
        "dp-plugin-no-nvml",
        "dp-gpu-fell-off-bus",
        "healthy-nvidia-device-plugin",
        "eks-plugin-no-nvml",
        "eks-nvml-unknown-error",
        "healthy-eks",
        "aks-plugin-no-nvml",
        "healthy-aks",
    ],
)
def test_a_dump_names_what_the_live_cluster_names(tmp_path: Path, scenario: str) -> None:
    sim = build(load_scenario(scenario))
    live = run_doctor(sim.cluster, reader=sim.read_log)  # as on a live cluster: the logs it asks for
    write_dump(sim.cluster, tmp_path)
    _strip_item_kinds(tmp_path)
    offline = diagnose(read_dump(tmp_path))
    assert [g.id for g in offline.root_causes] == [g.id for g in live.root_causes]
    assert [sorted(g.nodes) for g in offline.root_causes] == [sorted(g.nodes) for g in live.root_causes]
    assert offline.stack["id"] == live.stack["id"] and offline.gpu_nodes == live.gpu_nodes


def test_a_plain_kubectl_dump_without_the_extras(tmp_path: Path) -> None:
    """No clusterpolicies.json, runtimeclasses.json or configmaps.json: no guess from their absence."""
    for scenario, expected in (("healthy-gpu-operator", []), ("friday-scale-out", ["driver.kernel-mismatch"])):
        where = tmp_path / scenario
        write_dump(build(load_scenario(scenario)).cluster, where)
        for extra in ("clusterpolicies.json", "nvidiadrivers.json", "runtimeclasses.json"):
            (where / extra).unlink()
        for cm in where.glob("*/configmaps.json"):
            cm.unlink()
        report = diagnose(read_dump(where))
        assert [g.id for g in report.root_causes if g.severity.value == "error"] == expected, report.ids


def test_a_plain_kubectl_dump_never_reads_the_policys_defaults(tmp_path: Path) -> None:
    """The policy turns the driver container off and the nodes bring their own driver: without the
    ClusterPolicy the absent nvidia-driver-daemonset is not judged (it used to be
    operand.not-deployed on every node), and the report says what the dump lacks."""
    write_dump(build(load_scenario("op-driver-skew-host")).cluster, tmp_path)
    (tmp_path / "clusterpolicies.json").unlink()
    report = diagnose(read_dump(tmp_path))
    assert [g.id for g in report.root_causes] == ["driver.version-skew"], report.ids
    assert any(line.startswith("the dump has no ClusterPolicy") for line in report.not_judged)
    assert {c.state("driver") for c in report.chains} == {LinkState.OK}
    # Without a driver validated on the node, the missing DaemonSet is a link not judged, not a fault.
    for validator in tmp_path.glob("gpu-operator/nvidia-operator-validator-*"):
        shutil.rmtree(validator)
    pods = json.loads((tmp_path / "gpu-operator" / "pods.json").read_text())
    pods["items"] = [p for p in pods["items"] if "validator" not in p["metadata"]["name"]]
    (tmp_path / "gpu-operator" / "pods.json").write_text(json.dumps(pods))
    nodes = json.loads((tmp_path / "nodes.json").read_text())
    for node in nodes["items"]:
        node["metadata"]["labels"].pop("nvidia.com/cuda.driver-version.full", None)
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    unsure = diagnose(read_dump(tmp_path))
    assert "operand.not-deployed" not in unsure.ids and not unsure.broken, unsure.ids
    driver = {c.links[0].state: c.links[0].summary for c in unsure.chains}
    assert list(driver) == [LinkState.NOT_JUDGED]
    assert "the dump has no ClusterPolicy" in driver[LinkState.NOT_JUDGED]


def test_a_plain_kubectl_dump_of_an_operator_that_never_ran_names_its_pending_pod(tmp_path: Path) -> None:
    """No ClusterPolicy and no DaemonSet in the dump: the GPU Operator is found by its own pod, and the
    root cause is that pod, not 'no GPU stack' and not a link left unjudged."""
    write_dump(build(load_scenario("op-operator-pending")).cluster, tmp_path)
    (tmp_path / "clusterpolicies.json").unlink()
    report = diagnose(read_dump(tmp_path))
    assert report.stack["id"] == "gpu-operator" and report.stack["namespace"] == "gpu-operator"
    assert [g.id for g in report.root_causes] == ["operator.not-running"], report.ids


def test_a_plain_kubectl_dump_names_no_configmap_the_policy_would_name(tmp_path: Path) -> None:
    """The time-slicing explanation named "ConfigMap gpu-operator/ key 'any'": a name read from the
    defaults of a policy the dump does not have."""
    write_dump(build(load_scenario("op-time-slicing-leftover")).cluster, tmp_path)
    (tmp_path / "clusterpolicies.json").unlink()
    found = next(f for f in diagnose(read_dump(tmp_path)).findings if f.id == "device-plugin.time-slicing")
    assert "config source: key 'any' of the device plugin's ConfigMap (the dump has no ClusterPolicy" in " ".join(
        found.evidence
    )


@pytest.mark.parametrize("scenario", ["healthy-gpu-operator", "op-time-slicing-leftover", "friday-scale-out"])
def test_a_dump_gpuchain_writes_lacks_nothing_the_doctor_reads(tmp_path: Path, scenario: str) -> None:
    write_dump(build(load_scenario(scenario)).cluster, tmp_path)
    snapshot = read_dump(tmp_path)
    assert snapshot.absent == frozenset() and diagnose(snapshot).not_judged == []


def test_the_table_says_what_a_plain_kubectl_dump_lacks(tmp_path: Path) -> None:
    write_dump(build(load_scenario("healthy-gpu-operator")).cluster, tmp_path)
    for extra in ("clusterpolicies.json", "runtimeclasses.json", "gpu-operator/configmaps.json"):
        (tmp_path / extra).unlink()
    result = runner.invoke(app, ["doctor", "--from-dump", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"gpuchain doctor: dump {tmp_path}, 3 GPU node(s)")
    assert lines[2] == "nothing broken in what the source holds; see what was not judged"
    lacks = [line for line in lines if line.startswith("not judged: the dump has no ")]
    assert [line.split(" (")[0].removeprefix("not judged: the dump has no ") for line in lacks] == [
        "ClusterPolicy",
        "ConfigMaps of gpu-operator",
        "RuntimeClasses",
    ]


def test_a_dump_with_no_gpu_node_exits_3_and_names_the_directory(tmp_path: Path) -> None:
    write_dump(
        build(parse_scenario("name: cpu\nstack: none\nnodes: [{name: cpu, count: 2, gpu: false}]\n")).cluster, tmp_path
    )
    result = runner.invoke(app, ["doctor", "--from-dump", str(tmp_path)])
    assert result.exit_code == 3
    assert f"no GPU node found in dump {tmp_path}: 2 node(s), none with an NVIDIA GPU" in result.stdout


def test_logs_txt_as_kubectl_writes_it() -> None:
    text = (
        "==== START logs for container driver-validation of pod gpu-operator/nvidia-operator-validator-x ====\n"
        "running command chroot with args [/run/nvidia/driver nvidia-smi]\n"
        "==== END logs for container driver-validation of pod gpu-operator/nvidia-operator-validator-x ====\n"
        "==== START logs for container nvidia-operator-validator of pod gpu-operator/nvidia-operator-validator-x ====\n"
        'Request log error: container "nvidia-operator-validator" in pod is waiting to start: PodInitializing\n'
        "==== END logs for container nvidia-operator-validator of pod gpu-operator/nvidia-operator-validator-x ====\n"
    )
    logs = parse_logs(text)
    assert logs == {
        ("gpu-operator", "nvidia-operator-validator-x", "driver-validation"): (
            "running command chroot with args [/run/nvidia/driver nvidia-smi]"
        )
    }
    with pytest.raises(DumpError, match="line 2"):
        parse_logs(text.splitlines()[0] + "\n" + text)
    with pytest.raises(DumpError, match="no END header"):
        parse_logs(text.splitlines()[0] + "\n")


def test_a_malformed_dump_is_one_line_naming_the_file(tmp_path: Path) -> None:
    write_dump(build(load_scenario("healthy")).cluster, tmp_path)
    bad = tmp_path / "gpu-operator" / "pods.json"
    bad.write_text('{"kind": "PodList", "items": [')
    result = runner.invoke(app, ["doctor", "--from-dump", str(tmp_path)])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and str(bad) in result.output
    (tmp_path / "nodes.json").unlink()
    result = runner.invoke(app, ["doctor", "--from-dump", str(tmp_path)])
    assert result.exit_code == 2 and "no nodes.json" in result.output
    nothing = runner.invoke(app, ["doctor", "--from-dump", str(tmp_path / "missing")])
    assert nothing.exit_code == 2 and "no such directory" in nothing.output


def test_doctor_dump_then_from_dump_on_the_command_line(tmp_path: Path) -> None:
    written = runner.invoke(app, ["doctor", "dump", str(tmp_path), "--scenario", "gpu-fell-off-bus"])
    assert written.exit_code == 0, written.output
    assert (tmp_path / "nodes.json").is_file() and (tmp_path / "clusterpolicies.json").is_file()
    result = runner.invoke(app, ["doctor", "--from-dump", str(tmp_path), "-o", "json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["rootCauses"] == ["gpu.lost"] and data["apiCalls"] == {}


def test_a_dump_file_that_is_a_fifo_is_one_line_not_a_hang(tmp_path: Path) -> None:
    """A FIFO where kubectl writes a file (a list or a pod's logs) is refused at once: reading it
    would block the doctor forever."""
    write_dump(build(load_scenario("healthy")).cluster, tmp_path)
    pods = tmp_path / "gpu-operator" / "pods.json"
    pods.unlink()
    os.mkfifo(pods)
    result = runner.invoke(app, ["doctor", "--from-dump", str(tmp_path)])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "FIFO" in result.output and str(pods) in result.output
    pods.unlink()
    log = next(tmp_path.glob("*/*/logs.txt"))
    log.unlink()
    os.mkfifo(log)
    result = runner.invoke(app, ["doctor", "--from-dump", str(tmp_path)])
    assert result.exit_code == 2 and "FIFO" in result.output and str(log) in result.output


def test_a_log_with_bytes_that_are_not_utf8_is_still_read(tmp_path: Path) -> None:
    """Container logs keep whatever bytes a program wrote; the doctor reads them, replacing what
    does not decode, instead of refusing the dump."""
    write_dump(build(load_scenario("healthy")).cluster, tmp_path)
    log = next(tmp_path.glob("*/*/logs.txt"))
    text = log.read_bytes()
    end = text.index(b"==== END")
    log.write_bytes(text[:end] + b"binary \xff\xfe noise\n" + text[end:])
    result = runner.invoke(app, ["doctor", "--from-dump", str(tmp_path)])
    assert result.exit_code == 0, result.output
