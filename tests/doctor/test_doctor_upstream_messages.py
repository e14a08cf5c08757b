"""The components' error messages, read from their source at pinned releases by
scripts/upstream-messages (tests/doctor/fixtures/upstream-messages.yaml), are each known to an entry of
the doctor's catalog or set aside with a stated reason: a line a user meets is never left to
"log.unrecognised" because nobody read the component's source."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from doctor.small_cluster import diagnosed

from gpuchain.doctor import catalog

ROOT = Path(__file__).resolve().parents[2]
DATA: dict[str, Any] = yaml.safe_load((ROOT / "tests/doctor/fixtures/upstream-messages.yaml").read_text())
MESSAGES: list[dict[str, str]] = DATA["messages"]


def _script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("upstream_messages", str(ROOT / "scripts/upstream-messages"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: f"{m['component']}:{m['line'][:40]}")
def test_every_recorded_message_is_known_or_set_aside_with_a_reason(message: dict[str, str]) -> None:
    known = catalog.knows(message["line"])
    reason = message.get("not_user_facing")
    assert known is not None or reason, f"{message['source']}: {message['line']!r} has no catalog entry and no reason"
    # A reason on a line an entry knows is stale: the entry is what the doctor uses.
    assert not (known and reason), (
        f"{message['line']!r} is known to {known.id if known else ''} and set aside as {reason}"
    )
    assert reason is None or reason in DATA["reasons"], reason


def test_every_record_names_its_pinned_source_and_every_reason_is_used() -> None:
    script = _script()
    pinned = {f"{repo} @{tag}" for _, repo, tag, *_ in (*script.PINNED, *script.OTHER_RELEASES, *script.SCRIPTS)}
    for m in MESSAGES:
        repo, rest = m["source"].split(" ", 1)
        assert f"{repo} @{rest.rsplit('@', 1)[1]}" in pinned, m["source"]
    used = {m.get("not_user_facing") for m in MESSAGES}
    assert set(DATA["reasons"]) <= used, set(DATA["reasons"]) - used
    assert len({(m["source"], m["line"]) for m in MESSAGES}) == len(MESSAGES)


def test_the_lines_a_user_meets_most_have_an_entry_with_an_exact_setting() -> None:
    """The classes of failure users report most (NVML init, runtime config, config parsing, the MIG
    manager's inputs, registration) are known, and each fix names the key to set."""
    for line, key in [
        ("unable to load containerd config: %w", "CONTAINERD_CONFIG"),
        ("Cannot init NVML library; err: %v", "runtimeClassName"),
        ("invalid --device-list-strategy option: %v", "DEVICE_LIST_STRATEGY"),
        ("Could not register device plugin: %s", "device-plugins"),
        ("error parsing host's GPU clients file: %s", "gpuClientsConfig"),
        ("Could not read metrics file '%s'; err: %v", "DCGM_EXPORTER_COLLECTORS"),
    ]:
        assert any(m["line"] == line for m in MESSAGES), line
        found = catalog.knows(line)
        assert found is not None and key in found.fix, (line, found)


def test_the_script_takes_each_error_level_string_once_and_only_returned_errors_of_main() -> None:
    script = _script()
    go = "\n".join(
        [
            'klog.Errorf("could not %s: %v", a, err)',
            'log.WithError(err).Error("Failed to do it")',
            'slog.Error(fmt.Sprintf("bad value; err: %d", v))',
            'klog.Infof("all is well")',
            "return fmt.Errorf(`raw %q`, x)",
            'panic("never")',
        ]
    )
    lines = [(m.group(1), script._go_string(m.group(2))) for m in script.LOGGED.finditer(go)]
    assert lines == [
        ("klog.Errorf", "could not %s: %v"),
        (".WithError(err).Error", "Failed to do it"),
        ("slog.Error", "bad value; err: %d"),
        ("fmt.Errorf", "raw %q"),
        ("panic", "never"),
    ]
    assert script._go_string(r'"say \"hi\" \\ there\n"') == 'say "hi" \\ there\\n'
    assert re.search(script.LOGGED, 'klog.Warningf("x")') is None


def test_the_script_takes_the_failure_lines_a_shell_entry_point_echoes() -> None:
    """A driver container script's failure is an echo to stderr, after a failing word, or right before a
    non-zero return; its progress lines and the echo inside a trap's string are not."""
    script = _script()
    sh = "\n".join(
        [
            'echo "Updating the package cache..."',
            "    if ! apt-get update; then",
            '        echo "ERROR: Failed to update package cache. "\\',
            '             "Ensure the cluster can reach it."',
            "        exit 1",
            "    fi",
            'echo "Could not resolve Linux kernel version" >&2',
            'echo "Found package ${pkg}"',
            "return 1",
            "trap \"echo 'Caught signal'; exit 0\" TERM",
            'echo "Starting NVIDIA persistence daemon..."',
        ]
    )
    assert script.shell_messages(sh) == [
        "ERROR: Failed to update package cache. Ensure the cluster can reach it.",
        "Could not resolve Linux kernel version",
        "Found package ${pkg}",
    ]


#: (stack, DaemonSet, container, the line as the component prints it, the entry, a key its fix names)
CRASHES = [
    (
        "nvidia-device-plugin",
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin-ctr",
        "E0101 00:00:01.000000 1 main.go:1] error: invalid --device-list-strategy option: volume-mount",
        "k8s-device-plugin.invalid-device-list-strategy",
        "DEVICE_LIST_STRATEGY",
    ),
    (
        "gpu-operator",
        "nvidia-container-toolkit-daemonset",
        "nvidia-container-toolkit-ctr",
        'time="2026-01-01T00:00:01Z" level=fatal msg="error running nvidia-toolkit: unable to setup runtime: '
        'unknown runtime: cri-o"',
        "nvidia-container-toolkit.unknown-runtime",
        "RUNTIME",
    ),
    (
        "gpu-operator",
        "nvidia-dcgm-exporter",
        "nvidia-dcgm-exporter",
        "time=2026-01-01T00:00:01Z level=ERROR msg=\"Could not read metrics file '/etc/dcgm-exporter/dcgm-metrics.csv'; "
        'err: open /etc/dcgm-exporter/dcgm-metrics.csv: no such file or directory"',
        "dcgm-exporter.metrics-file-unreadable",
        "spec.dcgmExporter.config.name",
    ),
    (
        "gpu-operator",
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin",
        "E1206 10:00:00.000000 1 main.go:173] error starting plugins: unable to load config: unable to finalize "
        "config: unable to parse config file: error parsing config file: unknown version: v2",
        "k8s-device-plugin.config-unknown-version",
        "version: v1",
    ),
    (
        "gpu-operator",
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin",
        "E1206 10:00:00.000000 1 main.go:173] error starting plugins: error creating plugin manager: unable to "
        "create plugin manager: failed to construct resource managers: error building device map: error building "
        "device map from config.resources: error building MIG device map: more than one MIG device type present on node",
        "k8s-device-plugin.mig-types-mixed",
        "spec.mig.strategy=mixed",
    ),
    (
        "gpu-operator",
        "gpu-feature-discovery",
        "gpu-feature-discovery",
        "E1206 10:00:00.000000 1 main.go:100] error: unable to load config: unable to finalize config: unable to "
        "parse config file: error parsing config file: unmarshal error: error unmarshaling JSON: while decoding JSON: "
        "json: cannot unmarshal string into Go struct field TimeSlicing.sharing.timeSlicing.resources.replicas of type int",
        "k8s-device-plugin.config-unmarshal",
        "replicas: <integer>",
    ),
    (
        "gpu-operator",
        "nvidia-dcgm-exporter",
        "nvidia-dcgm-exporter",
        'time="2026-12-06T10:00:00Z" level=error msg="Failed to connect to remote hostengine" '
        'error="Host engine connection invalid/disconnected"',
        "dcgm-exporter.remote-hostengine-unreachable",
        "DCGM_REMOTE_HOSTENGINE_INFO",
    ),
    (
        "gpu-operator",
        "nvidia-dcgm-exporter",
        "nvidia-dcgm-exporter",
        'time=2026-12-06T10:00:00.000Z level=ERROR msg="could not find DCGM field; err: unknown ExporterCounter '
        "field 'DCGM_FI_DEV_FOO'\"",
        "dcgm-exporter.metrics-field-unknown",
        "spec.dcgmExporter.config.name",
    ),
]


@pytest.mark.parametrize(("stack", "ds", "container", "line", "entry_id", "key"), CRASHES, ids=[c[4] for c in CRASHES])
def test_a_component_crashing_on_a_recorded_line_gets_that_entrys_repair_not_unrecognised(
    stack: str, ds: str, container: str, line: str, entry_id: str, key: str
) -> None:
    crash = {"name": container, "state": {"waiting": "CrashLoopBackOff"}, "last": {"terminated": "Error"}}
    report = diagnosed(
        f"name: t\nstack: {stack}\nnodes:\n  - {{name: n1}}\n",
        {"do": "pod", "daemonset": ds, "node": "n1", "containers": [crash], "logs": {container: line}},
    )
    assert "log.unrecognised" not in report.ids
    root = next(f for f in report.findings if f.root)
    assert f"catalog: {entry_id}" in " ".join(root.evidence) and key in root.fix
