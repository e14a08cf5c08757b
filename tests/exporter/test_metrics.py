"""Pure metric building: entities, DCGM labels, pod duplication, the XID gauge and counter."""

from __future__ import annotations

import pytest

from gpuchain.exporter.counters import load_collectors, parse_collectors
from gpuchain.exporter.exposition import Family, histogram, render_families
from gpuchain.exporter.metrics import NodeSample, XidBook, entities, sample_families, xid_families
from gpuchain.exporter.podresources import PodRef
from gpuchain.gpu.sim import SimBackend

COUNTERS = load_collectors()


def _sample(sim: SimBackend, pods: dict[str, tuple[PodRef, ...]] | None = None) -> NodeSample:
    inv = sim.inventory()
    return NodeSample(
        inventory=inv,
        telemetry={g.uuid: sim.telemetry(g.uuid) for g in inv.gpus},
        pods=pods or {},
        mig_memory={m.uuid: sim.mig_memory(m.uuid) for m in inv.mig_devices},
    )


def _by_name(families: list) -> dict:  # type: ignore[type-arg]
    return {f.name: f for f in families}


def test_whole_gpu_labels_in_dcgm_order(h100_sim: SimBackend) -> None:
    gpu = h100_sim.inventory().gpus[3]
    ents = entities(h100_sim.inventory(), hostname="node-7", counters=COUNTERS)
    assert len(ents) == 8
    assert ents[3].labels == (
        ("gpu", "3"),
        ("UUID", gpu.uuid),
        ("pci_bus_id", gpu.pci_bus_id),
        ("device", "nvidia3"),
        ("modelName", "NVIDIA H100 80GB HBM3"),
        ("Hostname", "node-7"),
        ("DCGM_FI_DRIVER_VERSION", "570.86.15"),
    )


def test_mig_devices_are_entities_with_gpu_instance_labels(mig_sim: SimBackend) -> None:
    inv = mig_sim.inventory()
    ents = entities(inv, hostname="n", counters=parse_collectors("DCGM_FI_DEV_GPU_UTIL, gauge, u"))
    # GPUs 0-3: 4 MIG devices each, 4-5: 7 each, 6-7 whole
    assert len(ents) == 4 * 4 + 2 * 7 + 2
    mig = inv.gpus[4].mig_devices[6]
    entity = next(e for e in ents if e.uuid == mig.uuid)
    labels = dict(entity.labels)
    assert labels["gpu"] == "4"
    assert labels["UUID"] == inv.gpus[4].uuid
    assert labels["GPU_I_PROFILE"] == "1g.10gb"
    assert labels["GPU_I_ID"] == str(mig.gi_id)
    assert "DCGM_FI_DRIVER_VERSION" not in labels


def test_values_follow_telemetry(h100_sim: SimBackend) -> None:
    h100_sim.set_telemetry(2, gpu_util=87, memory_used_mib=30000, temperature_c=71, power_w=512.5)
    inv = h100_sim.inventory()
    fams = _by_name(
        sample_families(COUNTERS, sample=_sample(h100_sim), ents=entities(inv, hostname="n", counters=COUNTERS))
    )
    uuid = inv.gpus[2].uuid

    def value(name: str) -> float:
        return next(s.value for s in fams[name].samples if s.labels["UUID"] == uuid)

    assert value("DCGM_FI_DEV_GPU_UTIL") == 87
    assert value("DCGM_FI_DEV_FB_USED") == 30000
    assert value("DCGM_FI_DEV_GPU_TEMP") == 71
    assert value("DCGM_FI_DEV_POWER_USAGE") == 512.5
    assert fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "counter"


def test_mig_devices_repeat_gpu_wide_readings(mig_sim: SimBackend) -> None:
    mig_sim.set_telemetry(0, temperature_c=55)
    inv = mig_sim.inventory()
    fams = _by_name(
        sample_families(COUNTERS, sample=_sample(mig_sim), ents=entities(inv, hostname="n", counters=COUNTERS))
    )
    on_gpu0 = [s for s in fams["DCGM_FI_DEV_GPU_TEMP"].samples if s.labels["gpu"] == "0"]
    assert [s.labels["GPU_I_ID"] for s in on_gpu0] == [str(m.gi_id) for m in inv.gpus[0].mig_devices]
    assert {s.value for s in on_gpu0} == {55}


def test_mig_devices_get_their_own_framebuffer(mig_sim: SimBackend) -> None:
    """FB_USED/FB_FREE of a MIG device are its GPU instance's memory, not the whole GPU's."""
    inv = mig_sim.inventory()
    a, b = inv.gpus[4].mig_devices[:2]
    mig_sim.set_telemetry(4, memory_used_mib=70000)
    mig_sim.set_telemetry(a.uuid, memory_used_mib=3000)
    fams = _by_name(
        sample_families(COUNTERS, sample=_sample(mig_sim), ents=entities(inv, hostname="n", counters=COUNTERS))
    )

    def fb(name: str, gi_id: int) -> list[float]:
        return [
            s.value for s in fams[name].samples if s.labels["gpu"] == "4" and s.labels.get("GPU_I_ID") == str(gi_id)
        ]

    assert fb("DCGM_FI_DEV_FB_USED", a.gi_id) == [3000]
    assert fb("DCGM_FI_DEV_FB_FREE", a.gi_id) == [a.memory_mib - 3000]
    assert fb("DCGM_FI_DEV_FB_USED", b.gi_id) == [0]
    assert {s.labels["gpu"] for s in fams["DCGM_FI_DEV_FB_USED"].samples} == {str(g.index) for g in inv.gpus}
    assert not [s for s in fams["DCGM_FI_DEV_FB_RESERVED"].samples if "GPU_I_ID" in s.labels]


def test_mig_devices_do_not_inherit_the_gpus_utilisation(mig_sim: SimBackend) -> None:
    """GPU_UTIL on a MIG GPU is the whole card's: copying it would make every pod on it look that busy."""
    mig_sim.set_telemetry(4, gpu_util=90)
    inv = mig_sim.inventory()
    fams = _by_name(
        sample_families(COUNTERS, sample=_sample(mig_sim), ents=entities(inv, hostname="n", counters=COUNTERS))
    )
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL"):
        assert {s.labels["gpu"] for s in fams[name].samples} == {"6", "7"}, name


def test_no_made_up_dcgm_profiling_field(h100_sim: SimBackend) -> None:
    """GR_ENGINE_ACTIVE is a DCGM profiling counter; NVML's utilisation is not published under its name."""
    counters = parse_collectors("DCGM_FI_DEV_GPU_UTIL, gauge, u\nDCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, g\n")
    assert counters.skipped == ("DCGM_FI_PROF_GR_ENGINE_ACTIVE",)
    inv = h100_sim.inventory()
    names = {
        f.name
        for f in sample_families(
            COUNTERS, sample=_sample(h100_sim), ents=entities(inv, hostname="n", counters=COUNTERS)
        )
    }
    assert not {n for n in names if "PROF" in n}


def test_shared_device_gets_one_series_per_container(h100_sim: SimBackend) -> None:
    inv = h100_sim.inventory()
    uuid = inv.gpus[1].uuid
    pods = {uuid: (PodRef("ml", "infer-a", "server"), PodRef("ml", "infer-b", "server"))}
    fams = _by_name(
        sample_families(COUNTERS, sample=_sample(h100_sim, pods), ents=entities(inv, hostname="n", counters=COUNTERS))
    )
    util = [s for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples if s.labels["UUID"] == uuid]
    assert [(s.labels["namespace"], s.labels["pod"], s.labels["container"]) for s in util] == [
        ("ml", "infer-a", "server"),
        ("ml", "infer-b", "server"),
    ]
    others = [s for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples if s.labels["UUID"] != uuid]
    assert all("pod" not in s.labels for s in others)


def test_repeated_xid_moves_the_counter_while_the_gauge_stays(h100_sim: SimBackend) -> None:
    inv = h100_sim.inventory()
    ents = entities(inv, hostname="n", counters=COUNTERS)
    book = XidBook()
    book.record(inv.gpus[0].uuid, 79)
    book.record(inv.gpus[0].uuid, 79)
    book.record(inv.gpus[0].uuid, 48)
    book.record(inv.gpus[0].uuid, 79)
    fams = _by_name(xid_families(COUNTERS, book=book, ents=ents, pods={}))
    gauge = [s for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples if s.labels["gpu"] == "0"]
    assert [(s.labels["err_code"], s.value) for s in gauge] == [("79", 79.0)]
    quiet = [s for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples if s.labels["gpu"] == "1"]
    assert [(s.labels["err_code"], s.value) for s in quiet] == [("0", 0.0)]
    total = {s.labels["xid"]: s.value for s in fams["DCGM_EXP_XID_ERRORS_TOTAL"].samples if s.labels["gpu"] == "0"}
    assert total == {"48": 1.0, "79": 3.0}


def test_gpu_wide_xid_reaches_its_mig_devices(mig_sim: SimBackend) -> None:
    inv = mig_sim.inventory()
    ents = [e for e in entities(inv, hostname="n", counters=COUNTERS) if e.gpu_uuid == inv.gpus[4].uuid]
    book = XidBook()
    book.record(inv.gpus[4].uuid, 48)
    book.record(inv.gpus[4].mig_devices[2].uuid, 94)
    assert [book.last(e) for e in ents] == [48, 48, 94, 48, 48, 48, 48]
    assert book.totals(ents[2]) == {48: 1, 94: 1}


def test_exposition_keeps_dcgm_counter_names(h100_sim: SimBackend) -> None:
    inv = h100_sim.inventory()
    text = render_families(
        sample_families(COUNTERS, sample=_sample(h100_sim), ents=entities(inv, hostname="n", counters=COUNTERS))
    )
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in text
    first = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    assert first.startswith('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-')


@pytest.mark.parametrize("labels", [{}, {"stage": "reset", "node": "n"}])
@pytest.mark.parametrize("values", [[], [0.0004, 0.2, 0.2, 7.0, 30.0]])
def test_a_histogram_without_prometheus_client_is_written_as_prometheus_clients(
    labels: dict[str, str], values: list[float]
) -> None:
    """``exposition.histogram`` (the DRA plugin's and the repair loop's histograms, in roles that load
    no prometheus-client) writes what prometheus-client's HistogramMetricFamily writes."""
    from prometheus_client.metrics_core import HistogramMetricFamily

    bounds = (0.001, 0.25, 10.0)
    theirs = HistogramMetricFamily("x_seconds", "Seconds.", labels=list(labels))
    buckets = [(f"{b:g}", float(sum(1 for v in values if v <= b))) for b in bounds] + [("+Inf", float(len(values)))]
    theirs.add_metric(list(labels.values()), buckets, sum(values))
    ours = Family(
        "x_seconds", "Seconds.", "histogram", histogram("x_seconds", labels=labels, bounds=bounds, values=values)
    )
    assert render_families([ours]) == render_families([theirs])
