"""The shipped data files' parsed form (``gpu.shipped``: JSON under ``gpu/parsed/``) is what their
YAML says, and the node agents read it without PyYAML."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuchain.common.yamlfile import load_shipped
from gpuchain.gpu import shipped
from gpuchain.gpu.topology import preset_names


def test_the_parsed_files_are_the_yaml_files_as_generated() -> None:
    """A YAML file edited (or added, or removed) without regenerating fails here: the agents would
    read the old data."""
    on_disk = {p: p.read_text(encoding="utf-8") for p in shipped.PARSED.rglob("*.json")}
    assert on_disk == shipped.generate(), "src/gpuchain/gpu/parsed/ is stale: run `python -m gpuchain.gpu.shipped`"


def test_every_shipped_yaml_file_reads_as_its_own_data() -> None:
    """Every YAML file in the package is shipped (none forgotten in ``SOURCES``), and reads back
    as the YAML's data, integer keys as JSON writes them."""
    files = sorted(p.relative_to(shipped.HERE).as_posix() for p in shipped.HERE.rglob("*.yaml"))
    assert files == sorted(
        p.relative_to(shipped.PARSED).with_suffix(".yaml").as_posix() for p in shipped.PARSED.rglob("*.json")
    )
    for name in files:
        parsed = load_shipped((shipped.HERE / name).read_text(encoding="utf-8"))
        assert shipped.data(name) == json.loads(json.dumps(parsed)), name
    assert preset_names() == sorted(p.stem for p in (shipped.HERE / "presets").glob("*.yaml"))


def test_the_xid_table_catalog_and_a_preset_load_without_pyyaml() -> None:
    program = (
        "import sys\n"
        "from gpuchain.gpu import catalog, xid\n"
        "from gpuchain.gpu.topology import load_preset\n"
        "assert xid.describe(79).resolution.value == 'reboot-node'\n"
        "assert 13 in xid.default_ignored()\n"
        "assert catalog.model_for_name('NVIDIA H100 80GB HBM3') is not None\n"
        "assert load_preset('h100-80gb-x8').node == 'h100-node'\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'yaml'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_file_that_is_not_shipped_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="no-such-node"):
        shipped.data("presets/no-such-node.yaml")
