"""The README and docs stay true: the opening commands, links, the tour run on the simulated
default with its output checked, every command the README names run or parsed, and every
documented command line parsed as written."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from cli_parse import parse
from typer.testing import CliRunner

from gpuchain.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README, flags=re.S)


SETUP = ["scripts/setup && .venv/bin/gpuchain demo", "scripts/test"]


def test_opens_with_exactly_the_two_setup_commands() -> None:
    first = _blocks()[0].strip().splitlines()
    assert first == SETUP
    assert README.index("```bash") < README.index("\n## ")
    for script in ("scripts/setup", "scripts/test", ".ci/run"):
        assert (ROOT / script).stat().st_mode & 0o111, f"{script} must be executable"
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_the_setup_scripts_parse_and_chain_as_the_readme_says() -> None:
    """The two scripts install from the network, so the suite does not run them (CI does: ``.ci/run``
    execs ``scripts/test``, which runs ``scripts/setup --test`` first); bash parses both here."""
    for script in ("scripts/setup", "scripts/test"):
        proc = subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, (script, proc.stderr)
    assert "scripts/setup --test" in (ROOT / "scripts" / "test").read_text()


def test_the_first_command_s_main_job_runs_from_the_installed_executable() -> None:
    """``.venv/bin/gpuchain demo``: the console script next to this interpreter (the venv's, under
    ``scripts/test``), as a process of its own."""
    executable = Path(sys.executable).parent / "gpuchain"
    proc = subprocess.run([str(executable), "demo"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for needle in TOUR_OUTPUT["gpuchain demo"][1]:
        assert needle in proc.stdout, (needle, proc.stdout[-3000:])


def test_the_readme_reads_in_a_minute() -> None:
    assert len(README.splitlines()) <= 120
    figures = README.split("## Measured", 1)[1]
    assert "| figure | ratio | baseline |" in figures
    assert "(docs/performance.md)" in figures


def test_local_links_exist() -> None:
    links = re.findall(r"\]\(((?!http|#)[^)]+)\)", README)
    assert links
    for link in links:
        assert (ROOT / link).exists(), link


# ---- the tour: every command runs on the simulated default and says what the README says ----------


def _commands(text: str) -> list[str]:
    """The gpuchain command lines of the ```bash blocks in ``text``, comments removed."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(("gpuchain ", "kubectl gpuchain ")):
                lines.append(line.removeprefix("kubectl "))
    return lines


def _tour() -> list[str]:
    section = README.split("## A tour", 1)[1].split("\n## ", 1)[0]
    return _commands(section)


#: What each tour command must print (stdout) and its exit code; a new tour line needs an entry.
TOUR_OUTPUT: dict[str, tuple[int, list[str]]] = {
    "gpuchain demo": (
        0,
        ["(simulated)", "falls off the bus (XID 79)", "allocatable dropped", "within the same second"],
    ),
    "gpuchain demo --dra": (0, ["published 8 devices for driver gpu.gpuchain.io", "NodePrepareResources", "withdrawn"]),
    "gpuchain gpus --preset h100-80gb-x8-mig-mixed": (0, ["00000000:AB:00.0", "MIG devices", "Topology", "NV18"]),
    "gpuchain doctor --scenario friday-scale-out": (1, ["ROOT CAUSE driver.kernel-mismatch", "6.8.0-51-generic"]),
    "gpuchain sim list": (0, ["friday-scale-out", "driver.kernel-mismatch", "gpu-fell-off-bus"]),
    "gpuchain verify --scenario healthy": (0, ["production checklist: scenario healthy (simulated)", "PASS"]),
    "gpuchain plan --gpu a100-40gb --model-memory 3GiB --qps-per-instance 60": (
        0,
        ["Recommended: 7 x MIG 1g.5gb - 420 QPS per GPU", "time-slicing x10"],
    ),
    "gpuchain plan fleet --failure-rate 5% --gpus 128": (0, ["6.4 expected failures a year", "57 days"]),
    "gpuchain plan stack --nodes 100 --driver self-managed --driver-upgrades-per-year 3": (
        0,
        ["400 h", "By hand / operator: 50x", "Recommended: an operator"],
    ),
    "gpuchain mig apply -c all-1g.10gb --dry-run": (0, ["would apply (dry run) MIG layout 'all-1g.10gb'"]),
    "gpuchain gfd --oneshot --output-file -": (
        0,
        ["# simulated GPUs", "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count=8"],
    ),
    "gpuchain remediator --scenario xid79": (0, ["evict", "ml/train-0", "XID 79", "taint"]),
    "gpuchain top --scenario time-sliced": (
        0,
        ["gpu-0: 8 GPUs answering of 8 expected", "ml/train/main", "40,000", "research/notebook/main", "(no pod)"],
    ),
    "gpuchain operator render": (0, ["kind: DaemonSet", "name: gpuchain-node-agent"]),
}


def test_every_tour_line_has_an_expected_output() -> None:
    tour = _tour()
    assert len(tour) >= 10
    missing = [line for line in tour if line not in TOUR_OUTPUT and not line.startswith("gpuchain exporter")]
    assert not missing, f"add what these print to TOUR_OUTPUT: {missing}"


@pytest.mark.parametrize("line", [line for line in _tour() if not line.startswith("gpuchain exporter")])
def test_tour_command_runs_and_prints_what_the_readme_says(line: str) -> None:
    code, needles = TOUR_OUTPUT[line]
    result = CliRunner().invoke(app, shlex.split(line)[1:], env={"COLUMNS": "200"})
    assert result.exit_code == code, result.output
    for needle in needles:
        assert needle in result.stdout, (needle, result.stdout[-3000:])


def test_tour_exporter_serves_dcgm_metrics() -> None:
    """``gpuchain exporter --port 9400`` as a process; port 0 instead of 9400 so a busy port cannot fail it."""
    (line,) = [line for line in _tour() if line.startswith("gpuchain exporter")]
    args = [a if a != "9400" else "0" for a in shlex.split(line)[1:]]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuchain", *args, "--address", "127.0.0.1"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        url = re.search(r"serving (http://\S+)/metrics", first)
        assert url and first.rstrip().endswith("(simulated)"), first
        deadline = time.monotonic() + 60
        body = ""
        while "\nDCGM_FI_DEV_GPU_UTIL{" not in body and time.monotonic() < deadline:
            time.sleep(0.5)  # the first collection runs in the background after the server is up
            with urllib.request.urlopen(f"{url.group(1)}/metrics", timeout=10) as response:
                body = response.read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0"' in body
    assert 'modelName="NVIDIA H100 80GB HBM3"' in body


def test_topology_file_of_the_gpu_docs_works(tmp_path: Path) -> None:
    """docs/gpus.md's ``my-node.yaml``, written out, is what ``gpuchain gpus --topology`` reads."""
    doc = (ROOT / "docs" / "gpus.md").read_text()
    (text,) = [b for b in re.findall(r"```yaml\n(.*?)```", doc, flags=re.S) if b.startswith("node: my-node")]
    (tmp_path / "my-node.yaml").write_text(text)
    line = next(c for c in _commands(doc) if "--topology my-node.yaml" in c)
    result = CliRunner().invoke(app, shlex.split(line.replace("my-node.yaml", str(tmp_path / "my-node.yaml")))[1:])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (len(data["gpus"]), data["driver"]["version"], data["simulated"]) == (4, "570.86.15", True)
    assert sum(len(g["migDevices"]) for g in data["gpus"]) == 4 * 7


# ---- every command the README names is run (above) or parsed ----------------------------------------

#: How a code span or a ```bash line starts when it is a command someone would type.
COMMAND = re.compile(r"^(?:kubectl |helm |bash |export |python|sudo |\.venv/bin/|scripts/|\.ci/|gpuchain(?: |$))")


def _readme_commands() -> list[str]:
    """Every command line of the README: each ```bash line and each inline code span that is one."""
    lines = [line.split("  #")[0].strip() for block in _blocks() for line in block.splitlines() if line.strip()]
    prose = re.sub(r"```.*?```", "", README, flags=re.S)
    spans = [span.strip() for span in re.findall(r"`([^`\n]+)`", prose)]
    return lines + [span for span in spans if COMMAND.match(span)]


def _inline_gpuchain() -> list[str]:
    named = [c for c in _readme_commands() if c not in SETUP and c not in _tour() and "gpuchain" in c.split()[:2]]
    return list(dict.fromkeys(named))


def test_every_readme_command_is_run_or_parsed() -> None:
    """The two set-up lines (run above, or by CI), the tour (each run above) and gpuchain commands named
    in the prose (parsed below, or run where they are ``--help``); the scripts the set-up lines name,
    by name. Anything else a reader could type needs a check of its own before it goes in."""
    named = {"scripts/setup", "scripts/test", ".ci/run", ".venv/bin"}
    unchecked = [c for c in _readme_commands() if c not in SETUP and c not in _tour() and c not in _inline_gpuchain()]
    assert [c for c in unchecked if c not in named] == []


def _command_named(words: list[str]) -> Any:
    """The command ``gpuchain WORDS`` names, found group by group; a name alone needs no arguments."""
    command: Any = typer.main.get_command(app)
    ctx = command.make_context("gpuchain", [], resilient_parsing=True)
    for word in words:
        command = command.get_command(ctx, word)
        assert command is not None, f"no command {word!r}"
        ctx = command.make_context(word, [], parent=ctx, resilient_parsing=True)
    return command


@pytest.mark.parametrize("line", _inline_gpuchain())
def test_every_gpuchain_command_in_the_readme_prose_is_checked(line: str) -> None:
    """A command named in a sentence or the parts table exists; one written with options parses;
    ``--help`` (which click answers before parsing anything) is run."""
    argv = shlex.split(line.removeprefix("kubectl "))[1:]
    if "--help" in argv:
        result = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
        assert result.exit_code == 0 and "Usage" in result.output, result.output
    elif any(arg.startswith("-") for arg in argv):
        assert parse(argv).command.name
    else:
        assert _command_named(argv) is not None


def test_the_name_check_catches_a_wrong_name() -> None:
    with pytest.raises(AssertionError, match="no command 'mig-manger'"):
        _command_named(["mig-manger"])


# ---- every gpuchain command line in the README and docs/ parses as written -------------------------

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Placeholders in synopsis lines and what stands for them when the line is parsed.
PLACEHOLDERS = {"<link>": "driver", "$NODE_NAME": "gpu-1", '"$NODE_NAME"': "gpu-1"}


def _argv(line: str) -> list[str]:
    """The arguments of a documented command line: before a pipe or redirect, [optional] parts kept."""
    line = re.split(r"\s[|>]\s", line)[0]
    for placeholder, value in PLACEHOLDERS.items():
        line = line.replace(placeholder, value)
    return shlex.split(line.replace("[", " ").replace("]", " ").replace("|yaml", "").replace("|json", ""))[1:]


def _parse(argv: list[str]) -> str:
    """Parse ``argv`` the way the CLI would (options, choices, types, required values) without running it."""
    return str(parse(argv).command.name)


DOC_LINES = [(doc.relative_to(ROOT).as_posix(), line) for doc in DOCS for line in _commands(doc.read_text())]


@pytest.mark.parametrize(("doc", "line"), DOC_LINES, ids=[f"{d}: {line}" for d, line in DOC_LINES])
def test_every_documented_command_parses(doc: str, line: str) -> None:
    assert _parse(_argv(line)), f"{doc}: {line}"


def test_the_parse_check_catches_a_wrong_option() -> None:
    with pytest.raises(Exception, match="No such option"):
        _parse(_argv("gpuchain gpus --presets h100-80gb-x8"))


HELM_SET = re.compile(r"--set '?([a-zA-Z.]+)=")


def test_every_helm_set_in_the_docs_names_a_chart_value() -> None:
    values = yaml.safe_load((ROOT / "charts" / "gpuchain" / "values.yaml").read_text())
    # gpuchain's own chart: bash blocks that install or upgrade charts/gpuchain, and the install page
    # (other charts, such as NVIDIA's GPU Operator's --set nfd.enabled=true, have their own values).
    ours = [b for doc in DOCS for b in re.findall(r"```bash\n(.*?)```", doc.read_text(), flags=re.S)]
    texts = [b for b in ours if "charts/gpuchain" in b] + [(ROOT / "docs" / "install.md").read_text()]
    keys = {k for text in texts for k in HELM_SET.findall(text)}
    assert "operator.repository" in keys
    for key in keys:
        *parents, leaf = key.split(".")
        node = values
        for part in parents:
            assert isinstance(node, dict) and part in node, f"--set {key}: no such value in values.yaml"
            node = node[part]
        # An operand block also takes the image fields the ClusterPolicy has (templates/_helpers.tpl).
        assert leaf in node or leaf in ("repository", "image", "version"), f"--set {key}: no such value"
