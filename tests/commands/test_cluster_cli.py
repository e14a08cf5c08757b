"""Commands that open a live cluster or run node agents: one-line errors without a kubeconfig,
and simulated GPUs never written to a real cluster or node directory unless asked for."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from kube.kmock_server import kmock_server, write_kubeconfig
from typer.testing import CliRunner, Result

from gpuchain.cli import app
from gpuchain.commands._backend import BackendKind
from gpuchain.commands._cluster import mark, open_cluster, refuse_implicit_sim, resolve_backend
from gpuchain.kube import NODE, LiveCluster
from gpuchain.kube.errors import UnreachableError

runner = CliRunner()


@pytest.fixture
def no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home without ~/.kube/config, no $KUBECONFIG, not in a pod."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return tmp_path


def _one_line_error(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert len(result.output.strip().splitlines()) == 1, result.output
    return result.output


@pytest.mark.parametrize(
    "args",
    [
        ["operator", "status"],
        ["operator", "run"],
        ["validate", "plugin", "--node", "x", "--tries", "1"],
        ["remediator", "--once"],
        ["gpu-health", "--once", "--node", "n1", "--backend", "sim"],
        ["gfd", "--oneshot", "--output-file", "", "--node", "n1", "--backend", "sim"],
        ["mig-manager", "--node", "n1", "--once", "--backend", "sim"],
        ["doctor"],
        ["verify"],
    ],
)
def test_no_kubeconfig_is_one_line_naming_what_was_tried(no_kubeconfig: Path, args: list[str]) -> None:
    out = _one_line_error(runner.invoke(app, args))
    assert "no Kubernetes API configuration" in out
    assert "$KUBECONFIG (unset)" in out and "in-cluster config" in out and "Fix:" in out


def test_open_cluster_names_the_kubeconfig_and_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("foo: [")
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: Config\n")
    for path in (tmp_path / "missing", bad, empty):
        with pytest.raises(typer.Exit) as exc:
            open_cluster(str(path))
        assert exc.value.exit_code == 2
    out = _one_line_error(runner.invoke(app, ["operator", "status", "--kubeconfig", str(empty)]))
    assert f"kubeconfig {empty}" in out and "no 'clusters' section" in out
    out = _one_line_error(runner.invoke(app, ["operator", "status", "--kubeconfig", str(bad)]))
    assert "not valid YAML" in out
    out = _one_line_error(runner.invoke(app, ["operator", "status", "--kubeconfig", str(tmp_path / "missing")]))
    assert f"{tmp_path / 'missing'}: cannot read file: No such file or directory" in out


def test_open_cluster_with_a_context_that_is_not_there(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: k, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "current-context: c\n"
    )
    assert isinstance(open_cluster(str(config)), LiveCluster)
    out = _one_line_error(runner.invoke(app, ["doctor", "--kubeconfig", str(config), "--context", "prod"]))
    assert "no context 'prod'" in out and "have: c" in out and "context prod" in out


@contextlib.contextmanager
def _not_an_api_server() -> Iterator[str]:
    """A loopback HTTP server that answers every GET with a web page, as a proxy or ingress might."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><body>Welcome to nginx!</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


ONE_SHOT = [
    ["operator", "status"],
    ["validate", "plugin", "--node", "x", "--tries", "1"],
    ["remediator", "--once"],
    ["gpu-health", "--once", "--node", "n1", "--backend", "sim", "--pod-resources-socket", "/nonexistent"],
    ["gfd", "--oneshot", "--output-file", "", "--node", "n1", "--backend", "sim"],
    ["mig-manager", "--node", "n1", "--once", "--backend", "sim"],
    ["doctor"],
    ["verify"],
]


@pytest.mark.parametrize("args", ONE_SHOT)
def test_a_refusing_api_server_is_one_line_exit_2(tmp_path: Path, args: list[str]) -> None:
    # Port 1 on loopback: nothing listens, the connection is refused at once.
    config = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1")
    out = _one_line_error(runner.invoke(app, args, env={"KUBECONFIG": str(config), "HOME": str(tmp_path)}))
    assert "cannot talk to the Kubernetes API server at http://127.0.0.1:1" in out
    assert "connection refused" in out and f"$KUBECONFIG ({config})" in out and "Fix:" in out


@pytest.mark.parametrize("args", ONE_SHOT)
def test_a_server_that_is_not_the_api_is_one_line_exit_2(tmp_path: Path, args: list[str]) -> None:
    with _not_an_api_server() as url:
        config = write_kubeconfig(tmp_path / "kubeconfig", url)
        out = _one_line_error(runner.invoke(app, args, env={"KUBECONFIG": str(config), "HOME": str(tmp_path)}))
    assert f"cannot talk to the Kubernetes API server at {url}" in out
    assert "not Kubernetes API JSON" in out and "not a proxy or web page" in out


def test_operator_run_with_an_unreachable_server_is_one_line_exit_2(tmp_path: Path) -> None:
    """kopf would retry in its log forever; the operator asks once first (a subprocess: bounded)."""
    import os
    import subprocess
    import sys

    config = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1")
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(tmp_path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    result = subprocess.run(
        [sys.executable, "-m", "gpuchain", "operator", "run"],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, lines[:5]
    assert (
        "cannot talk to the Kubernetes API server at http://127.0.0.1:1" in lines[0]
        and "connection refused" in lines[0]
    )


def test_a_server_lost_after_it_answered_is_a_kube_error_agents_retry(tmp_path: Path) -> None:
    """Agents keep running through a control-plane restart: only a server never reached ends the command."""
    with kmock_server() as (url, _):
        cluster = open_cluster(server=url)
        assert cluster.list(NODE) == []
    with pytest.raises(UnreachableError, match="connection refused"):
        cluster.list(NODE)
    cluster.close()


@pytest.mark.parametrize("cmd", [["operator", "render"], ["operator", "crd"]])
def test_operator_manifests_refuse_an_unknown_output_format(cmd: list[str]) -> None:
    bad = runner.invoke(app, [*cmd, "-o", "xml"])
    assert bad.exit_code == 2 and "xml" in bad.output and not bad.stdout.startswith("apiVersion")
    good = runner.invoke(app, [*cmd, "-o", "json"])
    assert good.exit_code == 0 and isinstance(json.loads(good.stdout), list)


# ---- simulated backend: marked, and kept off real places unless --backend sim is typed ----------


def test_resolve_backend_tells_explicit_from_default() -> None:
    assert resolve_backend(None).implicit_sim
    assert not resolve_backend(BackendKind.sim).implicit_sim and resolve_backend(BackendKind.sim).simulated
    assert not resolve_backend(BackendKind.nvml).simulated
    assert (
        mark("ok", resolve_backend(None)) == "ok (simulated)" and mark("ok", resolve_backend(BackendKind.nvml)) == "ok"
    )
    with pytest.raises(typer.Exit):
        refuse_implicit_sim(resolve_backend(None), target="somewhere real")
    refuse_implicit_sim(resolve_backend(BackendKind.sim), target="somewhere real")


def test_gpu_health_refuses_the_default_sim_backend_on_a_live_cluster(no_kubeconfig: Path) -> None:
    out = _one_line_error(runner.invoke(app, ["gpu-health", "--once", "--node", "n1"]))
    assert "refusing to write simulated GPU results to node n1" in out and "--dry-run" in out
    dry = runner.invoke(app, ["gpu-health", "--dry-run", "--pod-resources-socket", "/nonexistent", "-o", "json"])
    assert dry.exit_code == 0 and json.loads(dry.stdout)["simulated"] is True


def test_gpu_health_with_explicit_sim_publishes_and_says_simulated(tmp_path: Path) -> None:
    with kmock_server() as (url, _):
        cluster = LiveCluster.from_url(url)
        cluster.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            f"apiVersion: v1\nkind: Config\nclusters: [{{name: k, cluster: {{server: '{url}'}}}}]\n"
            "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
            "current-context: c\n"
        )
        args = ["gpu-health", "--once", "--node", "n1", "--pod-resources-socket", "/nonexistent"]
        env = {"KUBECONFIG": str(kubeconfig)}
        refused = runner.invoke(app, args, env=env)
        assert refused.exit_code == 2 and "GPUHealthy" not in str(cluster.get(NODE, name="n1").get("status"))
        result = runner.invoke(app, [*args, "--backend", "sim"], env=env)
        assert result.exit_code == 0, result.output
        assert "(simulated)" in result.output
        cluster.close()


def test_gfd_refuses_default_sim_for_a_node_or_the_nfd_feature_file(no_kubeconfig: Path) -> None:
    node = _one_line_error(runner.invoke(app, ["gfd", "--oneshot", "--output-file", "", "--node", "n1"]))
    assert "node n1's labels" in node
    nfd = _one_line_error(runner.invoke(app, ["gfd", "--oneshot"]))
    assert "/etc/kubernetes/node-feature-discovery/features.d/gfd" in nfd and "--output-file" in nfd
    table = runner.invoke(app, ["gfd", "--oneshot", "--output-file", ""], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "(simulated)" in table.output


def test_dra_plugin_refuses_default_sim_in_the_kubelets_directories(tmp_path: Path) -> None:
    live = _one_line_error(runner.invoke(app, ["dra-plugin", "--cluster", "memory"]))
    assert "/var/lib/kubelet/plugins_registry" in live and "--backend sim" in live


def test_a_huge_kubeconfig_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A 100 MB file given as --kubeconfig once ran for 3 minutes and grew to 4.5 GB: it goes
    through the one input reader, which refuses it by its size (a sparse file: nothing to read)."""
    huge = tmp_path / "kubeconfig"
    with huge.open("wb") as fh:
        fh.truncate(100 * 1024 * 1024)
    out = _one_line_error(runner.invoke(app, ["doctor", "--kubeconfig", str(huge)]))
    assert f"{huge}: is larger than 1024 KiB" in out


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_kubeconfig_that_is_not_a_file_says_what_it_is(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "kube"
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    out = _one_line_error(runner.invoke(app, ["doctor", "--kubeconfig", str(path)]))
    what = "a directory" if kind == "directory" else "a FIFO (named pipe)"
    assert f"{path}: is {what}, not a regular file" in out and "not found" not in out


def test_kubeconfig_from_the_environment_goes_through_the_same_reader(no_kubeconfig: Path) -> None:
    (no_kubeconfig / ".kube").mkdir()
    (no_kubeconfig / ".kube" / "config").write_text("- a list\n- not a kubeconfig\n")
    out = _one_line_error(runner.invoke(app, ["doctor"]))
    assert "is not a kubeconfig" in out


def test_doctor_dump_into_an_existing_file_is_one_line(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("x")
    out = _one_line_error(runner.invoke(app, ["doctor", "dump", str(taken), "--scenario", "healthy"]))
    assert f"{taken}: exists and is not a directory" in out and "Errno" not in out
    below = taken / "dump"
    out = _one_line_error(runner.invoke(app, ["doctor", "dump", str(below), "--scenario", "healthy"]))
    assert "is a file, not a directory" in out and "Errno" not in out


@pytest.mark.parametrize("oneshot", [["--oneshot"], []])
def test_gfd_output_file_that_is_a_directory_is_refused_at_start(tmp_path: Path, oneshot: list[str]) -> None:
    """Before, the service started and failed every pass (and --oneshot exited 1), the temporary
    file landing beside the directory; now it is refused before any work, exit 2."""
    args = ["gfd", *oneshot, "--output-file", str(tmp_path), "--backend", "sim", "--machine-type-file", ""]
    out = _one_line_error(runner.invoke(app, args))
    assert f"--output-file {tmp_path}: is a directory" in out
    assert list(tmp_path.iterdir()) == []
