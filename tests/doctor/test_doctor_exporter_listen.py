"""dcgm-exporter's listen address given in the form its release does not read (issue 26): the fix is the exact
value to give DCGM_EXPORTER_LISTEN, where the exporter reads it, not another exporter release."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import crash_looping, diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, Report

OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n}\n"


def _exporter(log: str) -> dict[str, Any]:
    return {
        "do": "pod",
        "daemonset": "nvidia-dcgm-exporter",
        "node": "n",
        "containers": [crash_looping("nvidia-dcgm-exporter")],
        "logs": {"nvidia-dcgm-exporter": log},
    }


def _root(report: Report) -> Finding:
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    return root


def test_a_bare_port_for_the_listen_address_is_given_the_colon_the_exporter_needs() -> None:
    """NVIDIA/dcgm-exporter pkg/cmd/app.go@4.4.2-4.7.0 reads -a/--address (DCGM_EXPORTER_LISTEN) as host:port and
    logs "Failed to Listen and Server HTTP server." with Go's error (golang/go src/net/ipsock.go "missing port in
    address", net.AddrError "address %s: %s")."""
    log = (
        'time="2026-03-02T10:00:00Z" level=info msg="Starting webserver"\n'
        'time="2026-03-02T10:00:00Z" level=fatal msg="Failed to Listen and Server HTTP server." '
        'error="listen tcp: address 9400: missing port in address"\n'
    )
    root = _root(diagnosed(OPERATOR, _exporter(log)))
    assert (root.id, root.link) == ("exporter.not-ready", "exporter")
    assert '"name":"DCGM_EXPORTER_LISTEN","value":":9400"' in root.fix and "dcgmExporter" in root.fix
    assert "second" not in root.cause and "release" not in root.fix
    assert any(e.startswith("catalog: go.listen-missing-port (") for e in root.evidence)


def test_a_host_port_value_for_an_exporter_that_reads_a_port_number_is_given_the_bare_port() -> None:
    """Before the -a/--address flag (NVIDIA/gpu-monitoring-tools b62b8e2) DCGM_EXPORTER_LISTEN fed the int flag
    port; urfave/cli flag_int.go@v2.2.0 refuses ":9400" ("could not parse %q as int value for flag %s: %s")."""
    log = (
        'time="2020-05-02T10:00:00Z" level=fatal msg="could not parse \\":9400\\" as int value for flag port: '
        'strconv.ParseInt: parsing \\":9400\\": invalid syntax"\n'
    )
    root = _root(diagnosed(OPERATOR, _exporter(log)))
    assert (root.id, root.link) == ("exporter.not-ready", "exporter")
    assert '"name":"DCGM_EXPORTER_LISTEN","value":"9400"' in root.fix
    assert any(e.startswith("catalog: urfave-cli.listen-not-a-port (") for e in root.evidence)
