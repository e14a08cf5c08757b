"""The corpus says where each scenario comes from: a public report as owner/repo#number, "none
found", or a declared healthy baseline; tests/sim/SOURCES.md quotes the reports that were read,
and the simulator shows what those reports (or the named upstream code) show."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.common.labels import DEPLOY_PREFIX
from gpuchain.common.yamlfile import ConfigFileError
from gpuchain.kube.kinds import NODE, POD
from gpuchain.sim import build, load_scenario, parse_scenario, scenario_names
from gpuchain.sim.repair import LISTING, SCENARIO_NAMES
from gpuchain.sim.scenario import BASELINE, NO_SOURCE, builtin_dir, is_upstream_source, source_url

SOURCES = Path(__file__).with_name("SOURCES.md")
#: The GPU stacks issue 13 names; each needs a healthy baseline the doctor finds nothing on.
GPU_STACKS = ("gpuchain", "gpu-operator", "nvidia-device-plugin", "eks", "aks", "gke")


def _entries() -> dict[str, dict[str, str | list[str]]]:
    """SOURCES.md by heading: url, scenarios, format and the quoted lines."""
    entries: dict[str, dict[str, str | list[str]]] = {}
    current: dict[str, str | list[str]] = {}
    for line in SOURCES.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = {"quotes": []}
            entries[line[3:].strip()] = current
        elif current and line.startswith("> "):
            quotes = current["quotes"]
            assert isinstance(quotes, list)
            quotes.append(line[2:])
        elif current and re.match(r"^(url|scenarios|format|title): ", line):
            key, value = line.split(": ", 1)
            current[key] = value
    return entries


def _scenarios_of(entry: dict[str, str | list[str]]) -> list[str]:
    value = entry.get("scenarios", "")
    assert isinstance(value, str)
    return [s.strip() for s in value.split(",") if s.strip()]


def _origin(name: str) -> str:
    """The source a cluster or repair scenario declares."""
    return LISTING[name].source if name in LISTING else load_scenario(name).origin


def test_every_scenario_names_its_report_or_says_it_has_none() -> None:
    for name in scenario_names():
        sc = load_scenario(name)
        if sc.baseline:
            assert not sc.source and not sc.expect and sc.origin == BASELINE, name
        else:
            assert sc.source, f"{name}: no source; name the report (owner/repo#number) or say {NO_SOURCE!r}"
            assert is_upstream_source(sc.source) or sc.source == NO_SOURCE, name
    for name, listed in LISTING.items():
        assert is_upstream_source(listed.source) or listed.source == NO_SOURCE, name


def test_every_scenario_file_states_its_stack() -> None:
    """A tag, not a default: each file says which stack it is (the simulator renders its names)."""
    import yaml

    for path in sorted(builtin_dir().glob("*.yaml")):
        assert "stack" in yaml.safe_load(path.read_text(encoding="utf-8")), path.name


def test_each_stack_has_a_declared_baseline_and_at_least_forty_failures() -> None:
    scenarios = [load_scenario(n) for n in scenario_names()]
    baselines = {sc.stack for sc in scenarios if sc.baseline}
    assert set(GPU_STACKS) <= baselines
    sourced = [sc for sc in scenarios if is_upstream_source(sc.source)]
    assert len(sourced) + sum(is_upstream_source(li.source) for li in LISTING.values()) >= 40


def test_sources_md_quotes_every_report_it_lists_and_the_scenarios_cite_it() -> None:
    entries = _entries()
    assert len(entries) >= 10
    for source, entry in entries.items():
        names = _scenarios_of(entry)
        assert names, source
        if source == NO_SOURCE:
            assert all(_origin(n) == NO_SOURCE for n in names)
            continue
        assert is_upstream_source(source), source
        assert entry.get("url") == source_url(source), source
        assert entry["quotes"], f"{source}: no line quoted from the report"
        for name in names:
            if name in LISTING or name in scenario_names():  # a name may be listed before its file lands
                assert _origin(name) == source, f"{name} does not cite {source}"


def test_every_cited_report_is_quoted_in_sources_md() -> None:
    cited = {n for n in (*scenario_names(), *LISTING) if is_upstream_source(_origin(n))}
    listed = {n for source, e in _entries().items() if source != NO_SOURCE for n in _scenarios_of(e)}
    missing = sorted(cited - listed)
    assert not missing, f"cited but not quoted in tests/sim/SOURCES.md (add url and a quoted line): {missing}"


def test_every_none_found_is_listed_in_sources_md() -> None:
    listed = set(_scenarios_of(_entries()[NO_SOURCE]))
    unsourced = {n for n in (*scenario_names(), *LISTING) if _origin(n) == NO_SOURCE}
    assert unsourced == listed, "tests/sim/SOURCES.md's 'none found' list and the scenarios disagree"


def test_the_time_slicing_scenario_shows_the_reports_config_and_count() -> None:
    """gpu-operator#684: replicas 12 and capacity = allocatable = 12 per physical GPU."""
    sc = load_scenario("op-time-slicing-leftover")
    body = sc.device_plugin_configs["any"]["sharing"]["timeSlicing"]
    assert (body["renameByDefault"], body["failRequestsGreaterThanOne"], body["resources"][0]["replicas"]) == (
        False,
        False,
        12,
    )
    node = build(sc).cluster.get(NODE, name="gpu-1")
    gpus = int(node["metadata"]["labels"]["nvidia.com/gpu.count"])
    assert node["status"]["capacity"]["nvidia.com/gpu"] == node["status"]["allocatable"]["nvidia.com/gpu"]
    assert int(node["status"]["capacity"]["nvidia.com/gpu"]) == 12 * gpus


def test_the_opt_out_scenario_leaves_the_reports_three_operands_off_worker04() -> None:
    """gpu-operator#470: no toolkit, device plugin or validator pod on worker04; the others run."""
    sim = build(load_scenario("op-opted-out"))
    labels = sim.cluster.get(NODE, name="worker04")["metadata"]["labels"]
    off = {k.removeprefix(DEPLOY_PREFIX) for k, v in labels.items() if k.startswith(DEPLOY_PREFIX) and v == "false"}
    assert off == {"container-toolkit", "device-plugin", "operator-validator"}
    pods = {p["metadata"]["name"] for p in sim.cluster.list(POD, field_selector="spec.nodeName=worker04")}
    assert not [p for p in pods if "toolkit" in p or "device-plugin" in p or "validator" in p]
    assert any(p.startswith("nvidia-driver-daemonset") for p in pods)


def test_the_operator_pending_scenario_shows_the_reports_scheduler_words_and_nothing_it_would_make() -> None:
    """gpu-operator#371: the operator's pod requires enterprise.discover.com/shared=true, the nodes are
    labelled dedicated; the scheduler's words for that, and no operand the operator would have made."""
    from gpuchain.kube.kinds import CLUSTER_POLICY, DAEMONSET, EVENT
    from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY

    sim = build(load_scenario("op-operator-pending"))
    pod = next(p for p in sim.cluster.list(POD, namespace="gpu-operator") if p["metadata"]["name"].startswith("gpu-"))
    assert pod["status"]["phase"] == "Pending" and "nodeName" not in pod["spec"]
    said = pod["status"]["conditions"][0]["message"]
    assert "3 node(s) didn't match Pod's node affinity/selector" in said
    assert [e["message"] for e in sim.cluster.list(EVENT) if e["reason"] == "FailedScheduling"] == [said]
    assert sim.cluster.list(DAEMONSET) == [] and "status" not in sim.cluster.list(NVIDIA_CLUSTER_POLICY)[0]
    assert sim.cluster.list(CLUSTER_POLICY) == []
    assert not any("nvidia.com/gpu" in n["status"]["capacity"] for n in sim.cluster.list(NODE))


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        # NVIDIA's config-manager, with the format string quoted in SOURCES.md.
        (
            "op-config-label-missing",
            "E0605 18:00:00.000000       1 main.go:209] specified config h100-shared does not exist",
        ),
        # gpuchain's own plugin: its ConfigKeyError, as `gpuchain device-plugin` prints it.
        (
            "config-label-missing",
            "error: /config: nvidia.com/device-plugin.config: names config 'a100-shared', which does not exist; "
            "available: default, shared-2",
        ),
    ],
)
def test_a_missing_config_key_shows_the_real_components_line(scenario: str, expected: str) -> None:
    fmt = _entries()["nebuly-ai/nos#16"]["format"]
    assert isinstance(fmt, str)
    sim = build(load_scenario(scenario))
    pod = next(
        p
        for p in sim.cluster.list(POD, field_selector="spec.nodeName=gpu-1")
        if "device-plugin" in p["metadata"]["name"]
    )
    status = pod["status"]["containerStatuses"][0]
    log = status["lastState"]["terminated"]["message"]
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert log.splitlines()[-1] == expected
    if scenario.startswith("op-"):
        assert fmt.replace("%v", "h100-shared") in log
    assert "no config named" not in log and "unable to load config" not in log  # the old invented line


def test_the_schema_refuses_a_bad_source_and_a_baseline_with_a_source_or_a_finding() -> None:
    base = "name: x\nnodes: [{name: gpu-0}]\n"
    for extra, words in (
        ("source: gpu-operator 684\n", "must be owner/repo#number"),
        ("baseline: true\nsource: NVIDIA/gpu-operator#684\n", "a healthy baseline comes from no report"),
        ("baseline: true\nexpect: [gpu.lost]\n", "a healthy baseline expects no finding"),
    ):
        with pytest.raises(ConfigFileError, match=words):
            parse_scenario(base + extra)
    assert parse_scenario(base + f"source: {NO_SOURCE}\n").origin == NO_SOURCE


def test_sim_list_shows_every_scenario_with_stack_and_source_repair_loop_included() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["sim", "list", "-o", "json"])
    assert result.exit_code == 0
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert set(rows) == {*scenario_names(), *SCENARIO_NAMES}
    assert set(LISTING) == set(SCENARIO_NAMES)
    for name in SCENARIO_NAMES:
        assert (rows[name]["kind"], rows[name]["stack"], rows[name]["source"]) == (
            "repair",
            "gpuchain",
            LISTING[name].source,
        )
    assert rows["gpu-reset"]["url"] == "https://github.com/NVIDIA/k8s-device-plugin/issues/111"
    assert (rows["healthy-gke"]["source"], rows["healthy-gke"]["baseline"], rows["healthy-gke"]["url"]) == (
        BASELINE,
        True,
        None,
    )
    assert (rows["op-opted-out"]["stack"], rows["op-opted-out"]["source"]) == (
        "gpu-operator",
        "NVIDIA/gpu-operator#470",
    )
    table = runner.invoke(app, ["sim", "list"], env={"COLUMNS": "250"}).stdout
    for words in ("gpu-row-remap-pending", "NVIDIA/NVSentinel#1826", "healthy baseline", "none found", "source"):
        assert words in table


def test_driver_and_toolkit_logs_are_the_upstream_scripts_lines() -> None:
    """NVIDIA's driver container script and toolkit installer (see sim/operand_logs.py for the files): the
    runtime-not-configured node's toolkit log is the same as a healthy one's, as on a real node."""
    sim = build(load_scenario("op-runtime-not-configured"))
    logs = {}
    for node in ("gpu-ok", "gpu-kops"):
        for pod in sim.cluster.list(POD, field_selector=f"spec.nodeName={node}"):
            name, container = pod["metadata"]["name"], pod["spec"]["containers"][0]["name"]
            if name.startswith(("nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset")):
                logs[(node, name.split("-")[1])] = sim.read_log(pod["metadata"]["namespace"], name, container)
    assert logs[("gpu-ok", "driver")].splitlines()[-1] == "Done, now waiting for signal"
    assert "Starting installation of NVIDIA driver version" in logs[("gpu-ok", "driver")]
    toolkit = logs[("gpu-ok", "container")]
    assert toolkit == logs[("gpu-kops", "container")]
    assert toolkit.splitlines()[-1].endswith('level=info msg="Waiting for signal"')
    assert "Successfully signaled containerd" in toolkit and "WARNING" not in toolkit


def test_nvidia_cluster_policies_carry_only_the_status_nvidias_crd_defines() -> None:
    """Validated against NVIDIA's ClusterPolicy CRD (tests/compat/operator/fixtures, see its
    SOURCES.md): state, namespace and Ready/Error conditions; NFD missing reads as NVIDIA says it."""
    import jsonschema
    import yaml

    crd_file = Path(__file__).parents[1] / "compat" / "operator" / "fixtures" / "nvidia.com_clusterpolicies.yaml"
    crd = yaml.safe_load(crd_file.read_text(encoding="utf-8"))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    condition_keys = set(schema["properties"]["conditions"]["items"]["properties"])
    seen = 0
    for name in scenario_names():
        sc = load_scenario(name)
        if sc.stack != "gpu-operator":
            continue
        sim = build(sc)
        for policy in [o for k in sim.cluster.kinds() if k.kind == "ClusterPolicy" for o in sim.cluster.list(k)]:
            if "status" not in policy:  # no operator ever ran to write one
                assert sc.operator_pending, name
                continue
            status = policy["status"]
            jsonschema.validate(status, schema)
            assert set(status) <= set(schema["properties"]), name
            assert all(set(c) <= condition_keys for c in status["conditions"]), name
            assert {c["type"] for c in status["conditions"]} == {"Ready", "Error"}, name
            seen += 1
    assert seen >= 15
    healthy = build(load_scenario("healthy-gpu-operator"))
    (policy,) = [o for k in healthy.cluster.kinds() if k.kind == "ClusterPolicy" for o in healthy.cluster.list(k)]
    ready = next(c for c in policy["status"]["conditions"] if c["type"] == "Ready")
    assert (policy["status"]["state"], ready["reason"]) == ("ready", "Reconciled")
