"""The doctor reads container logs through the Cluster port: counted as verb ``logs``, capped, on both adapters."""

from __future__ import annotations

from kube.kmock_server import kmock_server

from gpuchain.doctor import run_doctor
from gpuchain.doctor.logs import TAIL_LINES, cluster_log_reader
from gpuchain.doctor.snapshot import MAX_LOGS
from gpuchain.kube import NODE, POD, LiveCluster, MemoryCluster, name_of
from gpuchain.sim import build, load_scenario, parse_scenario


def _drop_termination_messages(cluster: MemoryCluster) -> int:
    """Make every crash-looping container's last lines reachable only through its log: its last run stays (the
    kubelet serves the log of that run), the message the runtime kept of it goes."""
    n = 0
    for pod in cluster.snapshot(POD):
        statuses = pod.get("status", {}).get("containerStatuses") or []
        if any(cs.get("lastState") for cs in statuses):
            stripped = [_without_message(cs) for cs in statuses]
            cluster.patch_status(
                POD, name=name_of(pod), status={"containerStatuses": stripped}, namespace=pod["metadata"]["namespace"]
            )
            n += 1
    cluster.calls.reset()
    return n


def _without_message(status: dict) -> dict:
    last = (status.get("lastState") or {}).get("terminated")
    if last is None:
        return status
    return {**status, "lastState": {"terminated": {k: v for k, v in last.items() if k != "message"}}}


def test_the_simulator_serves_its_logs_through_the_port() -> None:
    sim = build(load_scenario("host-driver-conflict"))
    drivers = [p for p in sim.cluster.snapshot(POD) if name_of(p).startswith("nvidia-driver-daemonset")]
    texts = [
        sim.cluster.logs(name_of(p), namespace=p["metadata"]["namespace"], container="nvidia-driver-ctr")
        for p in drivers
    ]
    assert any("Could not unload NVIDIA driver kernel modules, driver is in use" in t for t in texts)
    assert sim.cluster.calls.snapshot() == {"logs": len(drivers)}


def test_a_log_read_through_the_port_names_the_cause_and_is_counted() -> None:
    sim = build(load_scenario("host-driver-conflict"))
    assert _drop_termination_messages(sim.cluster) >= 1
    assert run_doctor(sim.cluster).root_causes[0].id == "driver.not-ready"  # no reader: no log, cause unknown
    sim.cluster.calls.reset()
    report = run_doctor(sim.cluster, reader=cluster_log_reader(sim.cluster))
    assert report.root_causes[0].id == "driver.host-driver-conflict"
    assert report.api_calls == {"list": 9, "logs": 1}
    assert sim.cluster.calls.snapshot() == {"list": 9, "logs": 1}, "the cluster itself counted the log read"


def test_log_reads_through_the_port_stay_capped() -> None:
    sim = build(parse_scenario("name: x\nnodes:\n  - {name: g, count: 40, hostDriver: 535.161.08}\n"))
    assert _drop_termination_messages(sim.cluster) == 40
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert sim.cluster.calls.snapshot() == {"list": 9, "logs": MAX_LOGS}
    assert report.api_calls == {"list": 9, "logs": MAX_LOGS}


def test_the_reader_asks_the_live_api_for_the_tail_and_survives_a_missing_log() -> None:
    with kmock_server() as (url, emulator):
        served = emulator["get /api/v1/namespaces/gpu-operator/pods/dp-1/log"]
        served << b"error: failed to register with kubelet\n"
        live = LiveCluster.from_url(url)
        read = cluster_log_reader(live)
        assert read("gpu-operator", "dp-1", "device-plugin") == "error: failed to register with kubelet\n"
        assert read("gpu-operator", "absent", "device-plugin") is None
        assert [dict(r.params) for r in served] == [{"container": "device-plugin", "tailLines": str(TAIL_LINES)}]
        assert live.calls.snapshot() == {"logs": 2}
        live.close()


def test_an_unknown_container_reads_as_no_log() -> None:
    sim = build(load_scenario("healthy"))
    node = sim.cluster.snapshot(NODE)[0]
    pod = next(p for p in sim.cluster.snapshot(POD) if p["spec"].get("nodeName") == name_of(node))
    assert sim.read_log(pod["metadata"]["namespace"], name_of(pod), "no-such-container") is None


def _restart_with_fresh_log(cluster: MemoryCluster, pod: dict, container: str, fresh: str) -> str:
    """The container ran, failed and runs again: the failed run's log is now only --previous."""
    ns, name = pod["metadata"]["namespace"], name_of(pod)
    failed = cluster.logs(name, namespace=ns, container=container)
    ended = {"terminated": {"reason": "Error", "exitCode": 1}}
    statuses = [{**cs, "restartCount": 1, "lastState": ended} for cs in pod["status"]["containerStatuses"]]
    cluster.patch_status(POD, name=name, status={"containerStatuses": statuses}, namespace=ns)
    cluster.set_logs(name, namespace=ns, container=container, text=failed, previous=True)
    cluster.set_logs(name, namespace=ns, container=container, text=fresh)
    return failed


def test_after_a_restart_the_previous_run_log_names_the_cause() -> None:
    """`kubectl logs --previous`: the plugin's NVML failure is in the run before the restart."""
    sim = build(load_scenario("dp-plugin-no-nvml"))
    for pod in sim.cluster.snapshot(POD):
        _restart_with_fresh_log(
            sim.cluster, pod, "nvidia-device-plugin-ctr", "Starting Plugins.\nLoading configuration."
        )
    sim.cluster.calls.reset()
    report = run_doctor(sim.cluster, reader=sim.read_log)
    assert [g.id for g in report.root_causes] == ["toolkit.runtime-not-default"]
    finding = next(f for f in report.findings if f.id == "toolkit.runtime-not-default")
    assert any("could not load NVML library" in e for e in finding.evidence)
    # one current and one previous read per plugin pod, through the port
    assert sim.cluster.calls.snapshot().get("logs") == 2 * len(sim.cluster.snapshot(POD))


def test_gpuchain_dump_keeps_the_previous_run_and_kubectl_s_plain_dump_cannot(tmp_path) -> None:
    from gpuchain.doctor import diagnose
    from gpuchain.doctor.dump import read_dump, write_dump

    sim = build(load_scenario("dp-plugin-no-nvml"))
    for pod in sim.cluster.snapshot(POD):
        _restart_with_fresh_log(
            sim.cluster, pod, "nvidia-device-plugin-ctr", "Starting Plugins.\nLoading configuration."
        )
    write_dump(sim.cluster, tmp_path)
    previous = sorted(tmp_path.glob("kube-system/*/previous-logs.txt"))
    assert len(previous) == 2 and "could not load NVML library" in previous[0].read_text()
    assert [g.id for g in diagnose(read_dump(tmp_path)).root_causes] == ["toolkit.runtime-not-default"]
    for path in previous:  # what kubectl cluster-info dump writes: the current run only
        path.unlink()
    assert [g.id for g in diagnose(read_dump(tmp_path)).root_causes] != ["toolkit.runtime-not-default"]
