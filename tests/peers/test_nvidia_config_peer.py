"""gpuchain's device plugin config reader against NVIDIA's own, file by file.

The peer ``nvidia-dp-config`` (tests/peers/nvidia/) is NVIDIA's config package
(``github.com/NVIDIA/k8s-device-plugin/api/config/v1`` at v0.18.0, the newest release the Go module
proxy serves) run the way nvidia-device-plugin runs it at start: its flags' defaults, the file,
resource naming turned off, the checks it makes before touching a GPU. Each file goes to both; both
must start or both refuse, and when they start they must run with the same settings.

Inputs: every NVIDIA file in tests/compat/deviceplugin/fixtures (see its SOURCES.md), empty files,
and configs hypothesis writes over the whole space of the keys both readers know.

Where gpuchain differs on purpose it is listed in ``KNOWN`` with the reason, and the test checks
the difference is exactly that one (so a fix upstream or here shows up as a failure to update).

Hypothesis runs under the profile tests/conftest.py picks: in CI (CI=true, scripts/test) the same
draws every run, so red means a change broke something. Every input that once showed a difference
is kept in ``EXAMPLES`` (tests/peers/nvidia-config-examples/, one reviewed YAML file each) and
replayed first, as an explicit example, by the test that found it, under every profile. New
differences are looked for off CI by ``scripts/explore-config-differences`` (random draws, many more
examples, a database of its own); it saves the input each failing test shrank to into ``EXAMPLES``
(``GPUCHAIN_SAVE_DIFFERENCES=1``), for review: fix gpuchain, or add a ``KNOWN`` entry, and say why in
the file's comment.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpuchain.api.config.v1.environment import ENV_FLAGS
from gpuchain.api.config.v1.load import load_config
from gpuchain.api.config.v1.replicas import ReplicatedResource, ReplicatedResources
from gpuchain.api.config.v1.resources import SHARED_SUFFIX
from gpuchain.common.yamlfile import ConfigFileError
from peers.binaries import peer_or_skip

FIXTURES = Path(__file__).resolve().parents[1] / "compat" / "deviceplugin" / "fixtures"
MPS_ROOT = "/run/nvidia/mps"
"""Set for both readers: NVIDIA's plugin refuses MPS sharing without it, and its chart sets it."""

Outcome = dict[str, Any] | str
"""The settings a reader starts with (a projection both can express), or ``refused``."""

REFUSED = "refused"


def nvidia(paths: list[Path], variables: dict[str, str] | None = None) -> dict[Path, tuple[Outcome, str]]:
    """NVIDIA's reader on each file, with these environment variables: its settings, or refused
    with its reason."""
    binary = peer_or_skip("nvidia-dp-config")
    env = {"PATH": os.environ.get("PATH", ""), "MPS_ROOT": MPS_ROOT, **(variables or {})}
    done = subprocess.run(
        [str(binary), *map(str, paths)], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    out: dict[Path, tuple[Outcome, str]] = {}
    for line in done.stdout.splitlines():
        item = json.loads(line)
        path = Path(item["file"])
        out[path] = (REFUSED, item["error"]) if "error" in item else (nvidia_settings(item["config"]), "")
    return out


def nvidia_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The settings nvidia-device-plugin runs with, from the config it built."""
    flags = config["flags"]
    plugin = flags["plugin"]
    sharing = config.get("sharing") or {}
    kind, section = None, None
    if (sharing.get("mps") or {}).get("resources"):
        kind, section = "mps", sharing["mps"]
    elif (sharing.get("timeSlicing") or {}).get("resources"):
        kind, section = "time-slicing", sharing["timeSlicing"]
    return {
        "migStrategy": flags["migStrategy"],
        "failOnInitError": flags["failOnInitError"],
        "nvidiaDriverRoot": flags["nvidiaDriverRoot"],
        "nvidiaDevRoot": flags["nvidiaDevRoot"],
        "passDeviceSpecs": plugin["passDeviceSpecs"],
        "deviceListStrategy": sorted(set(plugin["deviceListStrategy"])),
        "deviceIDStrategy": plugin["deviceIDStrategy"],
        "sharing": None
        if section is None
        else {
            "kind": kind,
            "failRequestsGreaterThanOne": bool(section.get("failRequestsGreaterThanOne")),
            "resources": [
                {"name": r["name"], "announced": r.get("rename") or r["name"], "replicas": r["replicas"]}
                for r in section["resources"]
            ],
        },
    }


def gpuchain(path: Path, variables: dict[str, str] | None = None) -> tuple[Outcome, str]:
    """gpuchain's reader on one file and these environment variables, at start as the device
    plugin reads them."""
    try:
        config = load_config(path, env={"MPS_ROOT": MPS_ROOT, **(variables or {})})
    except ConfigFileError as exc:
        return REFUSED, str(exc)
    problems = config.plugin_problems()
    if problems:
        return REFUSED, "; ".join(problems)
    flags = config.flags
    replication = config.replication
    return {
        "migStrategy": flags.mig_strategy.value,
        "failOnInitError": flags.fail_on_init_error,
        "nvidiaDriverRoot": flags.nvidia_driver_root,
        "nvidiaDevRoot": flags.nvidia_dev_root or flags.nvidia_driver_root,
        "passDeviceSpecs": flags.plugin.pass_device_specs,
        "deviceListStrategy": sorted({s.value for s in flags.plugin.device_list_strategy}),
        "deviceIDStrategy": flags.plugin.device_id_strategy.value,
        "sharing": None
        if replication is None
        else {
            "kind": replication[0],
            "failRequestsGreaterThanOne": bool(replication[1].fail_requests_greater_than_one),
            "resources": [
                {"name": r.name, "announced": announced(r, replication[1]), "replicas": r.replicas}
                for r in replication[1].resources
            ],
        },
    }, ""


def announced(entry: ReplicatedResource, section: ReplicatedResources) -> str:
    """The resource name gpuchain announces for a shared entry (``renameByDefault`` resolved)."""
    return entry.rename or (entry.name + SHARED_SUFFIX if section.rename_by_default else entry.name)


Case = tuple[Any, tuple[Outcome, str], tuple[Outcome, str], dict[str, str]]
"""One file where the readers disagree: its parsed YAML, NVIDIA's outcome and reason, gpuchain's,
and the environment variables both were given."""


def empty_section_is_unset(case: Case) -> bool:
    """NVIDIA's own start-up log prints an unset section as ``"timeSlicing": {}``, and its reader
    refuses that JSON; gpuchain reads the empty section as unset so the logged JSON loads back."""
    data, theirs, ours, _ = case
    sharing = data.get("sharing") if isinstance(data, dict) else None
    return (
        theirs[0] == REFUSED
        and "no resources specified" in theirs[1]
        and ours[0] != REFUSED
        and isinstance(sharing, dict)
        and any(isinstance(v, dict) and not any(x is not None for x in v.values()) for v in sharing.values())
    )


def resource_listed_twice(case: Case) -> bool:
    """NVIDIA's plugin takes both entries and builds the same replica IDs twice, so the later entry
    overwrites the earlier one's devices and the count is the larger of the two; gpuchain refuses
    the file naming the resource."""
    _, theirs, ours, _ = case
    return theirs[0] != REFUSED and ours[0] == REFUSED and "is listed twice" in ours[1]


def overridden_value_checked(case: Case) -> bool:
    """NVIDIA's plugin checks only the value it ends up with, so a bad value in the file that an
    environment variable replaces goes unnoticed; gpuchain checks the file as a whole first (the
    same ConfigMap feeds feature discovery, which may not have that variable). The refusal names
    the overridden field, or one entry of it when it is a list (``deviceListStrategy.0``)."""
    _, theirs, ours, variables = case
    overridden = [".".join(path) for path, names in ENV_FLAGS if any(n in variables for n in names)]
    named = re.search(r": ([\w.]+?)(?:\.\d+)?: ", ours[1]) if ours[0] == REFUSED else None
    return theirs[0] != REFUSED and named is not None and named.group(1) in overridden


def mps_explicit_false_honoured(case: Case) -> bool:
    """The peer's release forces MPS ``failRequestsGreaterThanOne`` to true whatever the file says
    (k8s-device-plugin api/config/v1/config.go@v0.18.0 ``NewConfig``, as from v0.15.0 through
    v0.19.3); v0.20.0, the release gpuchain follows, honours an explicit false and defaults only an
    unset one to true (api/config/v1/config.go@v0.20.0, config_test.go@v0.20.0
    ``TestNewConfigHonorsExplicitMPSFailRequestsGreaterThanOneFalse``). Exactly that flag differs:
    every other setting both readers start with is the same."""
    data, theirs, ours, _ = case
    sharing = data.get("sharing") if isinstance(data, dict) else None
    mps = sharing.get("mps") if isinstance(sharing, dict) else None
    if not (isinstance(mps, dict) and mps.get("failRequestsGreaterThanOne") is False):
        return False
    if not (isinstance(theirs[0], dict) and isinstance(ours[0], dict) and ours[0]["sharing"] is not None):
        return False
    ours_sharing = ours[0]["sharing"]
    as_v018 = {**ours[0], "sharing": {**ours_sharing, "failRequestsGreaterThanOne": True}}
    return (
        ours_sharing["kind"] == "mps" and ours_sharing["failRequestsGreaterThanOne"] is False and as_v018 == theirs[0]
    )


KNOWN: tuple[tuple[str, Callable[[Case], bool]], ...] = (
    ("an empty sharing section is unset", empty_section_is_unset),
    ("a resource listed twice in one sharing section is refused", resource_listed_twice),
    ("a bad value in the file is refused even where the environment overrides it", overridden_value_checked),
    (
        "an explicit MPS failRequestsGreaterThanOne: false is honoured, as from v0.20.0 (the peer is v0.18.0)",
        mps_explicit_false_honoured,
    ),
)
"""Where gpuchain differs from NVIDIA's reader on purpose: the reason, and the test that a
disagreement is exactly that one (see each test's docstring for why)."""


def known_difference(
    text: str, theirs: tuple[Outcome, str], ours: tuple[Outcome, str], variables: dict[str, str] | None = None
) -> str | None:
    """Why gpuchain differs from NVIDIA on this file on purpose (a ``KNOWN`` reason), or None when it
    must not differ."""
    data = yaml.safe_load(text) if text.strip() else None
    case: Case = (data, theirs, ours, variables or {})
    return next((reason for reason, applies in KNOWN if applies(case)), None)


def compare(files: dict[Path, str], variables: dict[str, str] | None = None) -> list[str]:
    """Every file on which the two readers disagree, beyond the known differences."""
    theirs = nvidia(list(files), variables)
    diffs = []
    for path, text in files.items():
        ours = gpuchain(path, variables)
        if (theirs[path][0] == REFUSED) == (ours[0] == REFUSED) and (ours[0] == REFUSED or ours[0] == theirs[path][0]):
            continue
        if known_difference(text, theirs[path], ours, variables):
            continue
        diffs.append(f"{path.name} {variables or ''}:\n{text}\n  NVIDIA:   {theirs[path]}\n  gpuchain: {ours}")
    return diffs


def nvidia_files() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*") if p.suffix in {".yaml", ".json"} and p.name != "api-cases.yaml")


def test_nvidias_files_read_alike(tmp_path: Path) -> None:
    """Every NVIDIA config file in the compatibility fixtures, as shipped and without the README's
    ``...`` continuation line: both readers start with the same settings, or both refuse."""
    files: dict[Path, str] = {}
    for source in nvidia_files():
        text = source.read_text()
        variants = {"": text}
        if text.rstrip().endswith("..."):
            variants["-trimmed"] = text.rstrip()[: -len("...")].rstrip() + "\n"
        for tag, body in variants.items():
            path = tmp_path / f"{source.parent.name}-{source.stem}{tag}{source.suffix}"
            path.write_text(body)
            files[path] = body
    assert len(files) >= 15
    assert compare(files) == []


NAMES = st.sampled_from(
    [
        "nvidia.com/gpu",
        "gpu",
        "nvidia.com/mig-1g.10gb",
        "mig-3g.40gb",
        "nvidia.com/gpu.shared",
        "Bad_Name",
        "other.com/gpu",
        "",
    ]
)
DEVICES = st.sampled_from(["all", 2, 0, -1, [0, 1], ["0:1"], ["GPU-8f0d2d2e-5d2b-4a8b-9f3e-3a2b1c0d9e8f"], [], "some"])


@st.composite
def resource(draw: st.DrawFn) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if draw(st.booleans()) or draw(st.booleans()):
        entry["name"] = draw(NAMES)
    if draw(st.booleans()):
        entry["rename"] = draw(NAMES)
    if draw(st.booleans()):
        entry["devices"] = draw(DEVICES)
    if draw(st.integers(0, 5)):
        entry["replicas"] = draw(st.sampled_from([-1, 0, 1, 2, 4, 10, 100]))
    return entry


@st.composite
def section(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if draw(st.booleans()):
        body["renameByDefault"] = draw(st.booleans())
    if draw(st.booleans()):
        body["failRequestsGreaterThanOne"] = draw(st.booleans())
    if draw(st.integers(0, 4)):
        body["resources"] = draw(st.lists(resource(), max_size=3))
    return body


@st.composite
def config(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if draw(st.booleans()):
        doc["version"] = draw(st.sampled_from(["v1", "v2", ""]))
    flags: dict[str, Any] = {}
    for key, values in {
        "migStrategy": ["none", "single", "mixed", "bogus"],
        "failOnInitError": [True, False],
        "nvidiaDriverRoot": ["/", "/run/nvidia/driver"],
        "nvidiaDevRoot": ["/", "/dev-root"],
    }.items():
        if draw(st.booleans()):
            flags[key] = draw(st.sampled_from(values))
    plugin: dict[str, Any] = {}
    for key, values in {
        "passDeviceSpecs": [True, False],
        "deviceListStrategy": ["envvar", "volume-mounts", "cdi-annotations", "cdi-cri", ["envvar", "cdi-cri"], "bogus"],
        "deviceIDStrategy": ["uuid", "index", "bogus"],
    }.items():
        if draw(st.booleans()):
            plugin[key] = draw(st.sampled_from(values))
    if plugin:
        flags["plugin"] = plugin
    if flags:
        doc["flags"] = flags
    sharing: dict[str, Any] = {}
    for kind in draw(st.sampled_from([(), ("timeSlicing",), ("mps",), ("timeSlicing", "mps")])):
        sharing[kind] = draw(section())
    if sharing:
        doc["sharing"] = sharing
    return doc


EXAMPLES = Path(__file__).resolve().parent / "nvidia-config-examples"
"""Inputs that once showed a difference, replayed by the test named in each (see the module doc)."""
SAVE_DIFFERENCES = "GPUCHAIN_SAVE_DIFFERENCES"
"""Set to 1 (by scripts/explore-config-differences) to save new differences into ``EXAMPLES``."""

_last_difference: dict[str, Any] = {}
"""The last input of the running test on which the readers differed. Hypothesis runs the input it
shrank to last, so at the end of a failed test this is the one it reports."""


def saved_entries() -> list[dict[str, Any]]:
    """Every saved input: ``{"test": ..., "variables": ..., "doc": ...}`` each."""
    entries = [yaml.safe_load(path.read_text()) for path in sorted(EXAMPLES.glob("*.yaml"))]
    return [{"test": e["test"], "variables": e.get("variables") or {}, "doc": e["doc"]} for e in entries]


REPLAYING: set[str] = set()
"""The tests that replay their saved inputs (``replay_saved``)."""


def replay_saved(test: Callable[..., None]) -> Callable[..., None]:
    """``test`` with each saved input of its own as an explicit hypothesis example (run before any
    drawn one, under every profile). A test without ``variables`` replays only inputs without any."""
    REPLAYING.add(test.__name__)
    takes_variables = "variables" in inspect.signature(test).parameters
    for entry in saved_entries():
        if entry["test"] != test.__name__:
            continue
        if takes_variables:
            test = example(variables=entry["variables"], doc=entry["doc"])(test)
        else:
            assert not entry["variables"], f"{test.__name__} takes no environment variables to replay"
            test = example(doc=entry["doc"])(test)
    return test


def save_example(found: dict[str, Any]) -> Path | None:
    """Write ``found`` into ``EXAMPLES`` under a name that is a hash of its content, with a header
    asking the reviewer to say why it differed; None when that input is saved already (under any
    name: a reviewed file may be renamed)."""
    if found in saved_entries():
        return None
    body = yaml.safe_dump(found, sort_keys=False)
    path = EXAMPLES / f"{hashlib.sha256(body.encode()).hexdigest()[:12]}.yaml"
    path.write_text(
        "# Saved by scripts/explore-config-differences: the readers differed on this input.\n"
        "# Review: fix gpuchain or add a KNOWN entry, then replace these lines with why it differed.\n" + body
    )
    return path


@pytest.fixture(autouse=True)
def save_new_difference(request: pytest.FixtureRequest) -> Iterator[None]:
    """With ``GPUCHAIN_SAVE_DIFFERENCES=1``, the input a test ended on a difference with (the one
    hypothesis shrank to and reports) is saved into ``EXAMPLES`` under the test's name."""
    _last_difference.clear()
    yield
    if _last_difference and os.environ.get(SAVE_DIFFERENCES) == "1":
        saved = save_example({"test": request.node.originalname, **_last_difference})
        print(f"saved for review: {saved}" if saved else "the difference is a saved input: see its file's comment")


def written_alike(tmp_path: Path, doc: dict[str, Any], variables: dict[str, str]) -> None:
    """Write ``doc`` as YAML and check both readers start alike with ``variables`` (remembering the
    input for ``save_new_difference`` when they do not)."""
    path = tmp_path / "config.yaml"
    text = yaml.safe_dump(doc, sort_keys=False)
    path.write_text(text)
    diffs = compare({path: text}, variables or None)
    if diffs:
        _last_difference.update(variables=variables, doc=doc)
    assert diffs == []


DRAWN_EXAMPLES = max(200, settings.default.max_examples)
"""Drawn configs per run: 200, or the profile's count when that is higher (the explore profile)."""


@settings(max_examples=DRAWN_EXAMPLES, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=config())
@replay_saved
def test_written_configs_read_alike(tmp_path: Path, doc: dict[str, Any]) -> None:
    """Configs over the keys both readers know: both start with the same settings, or both refuse."""
    written_alike(tmp_path, doc, {})


def test_every_saved_input_is_replayed() -> None:
    """A saved file naming a test that does not replay it (a typo, a renamed test) would never run."""
    entries = saved_entries()
    assert entries and {e["test"] for e in entries} <= REPLAYING


def test_a_difference_is_saved_once_for_review(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the exploration run saves reads back as the input found; the same input is not saved twice."""
    monkeypatch.setattr(sys.modules[__name__], "EXAMPLES", tmp_path)
    found = {"test": "test_written_configs_read_alike", "variables": {}, "doc": {"flags": {"migStrategy": "single"}}}
    path = save_example(found)
    assert path is not None and path.read_text().startswith("# Saved by scripts/explore-config-differences")
    assert saved_entries() == [found]
    assert save_example(found) is None and len(list(tmp_path.iterdir())) == 1


BOOLS = ["true", "false", "1", "0", "t", "F", "TRUE", "False", "yes", ""]
ENVIRONMENT = {
    "MIG_STRATEGY": ["none", "single", "mixed", "Mixed", "bogus"],
    "FAIL_ON_INIT_ERROR": BOOLS,
    "PASS_DEVICE_SPECS": BOOLS,
    "NVIDIA_DRIVER_ROOT": ["/", "/run/nvidia/driver"],
    "NVIDIA_DEV_ROOT": ["/", "/dev-root"],
    "DEVICE_LIST_STRATEGY": ["envvar", "volume-mounts", "envvar,cdi-annotations", "cdi-cri, envvar", "bogus"],
    "DEVICE_ID_STRATEGY": ["uuid", "index", "bogus"],
}


@settings(max_examples=DRAWN_EXAMPLES * 3 // 4, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    variables=st.lists(st.sampled_from(sorted(ENVIRONMENT)), max_size=4, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: st.sampled_from(ENVIRONMENT[k]) for k in keys})
    ),
    doc=config(),
)
@replay_saved
def test_environment_over_the_file_reads_alike(tmp_path: Path, variables: dict[str, str], doc: dict[str, Any]) -> None:
    """The plugin's environment variables over a file (the environment wins): both readers start with
    the same settings or both refuse, for the spellings Go's flag parsing takes and those it does not."""
    written_alike(tmp_path, doc, variables)


@pytest.mark.parametrize(
    "name", ["plugin-running-config-zalando-pr8468.json", "gfd-running-config-nvkind-issue20.json"]
)
def test_nvidia_refuses_its_own_logged_config(name: str) -> None:
    """The "Running with config" JSON NVIDIA's components log does not load back into NVIDIA's reader
    (it prints an unset section as ``"timeSlicing": {}``); gpuchain loads it (the known difference)."""
    path = FIXTURES / "logged" / name
    theirs = nvidia([path])[path]
    assert theirs[0] == REFUSED and "no resources specified" in theirs[1]
    assert gpuchain(path)[0] != REFUSED


MPS_EXPLICIT_FALSE = (
    "version: v1\nsharing:\n  mps:\n    failRequestsGreaterThanOne: false\n"
    "    resources:\n      - name: nvidia.com/gpu\n        replicas: 2\n"
)
"""The file of NVIDIA's config_test.go@v0.20.0 TestNewConfigHonorsExplicitMPSFailRequestsGreaterThanOneFalse."""


def test_the_peer_forces_mps_fail_requests_greater_than_one(tmp_path: Path) -> None:
    """The peer (v0.18.0) runs MPS with failRequestsGreaterThanOne true although the file says false;
    gpuchain honours the false as v0.20.0 does; the disagreement is the known one and only that.
    When the peer is moved to a release that honours it, this fails: drop the ``KNOWN`` entry."""
    path = tmp_path / "mps.yaml"
    path.write_text(MPS_EXPLICIT_FALSE)
    theirs, ours = nvidia([path])[path], gpuchain(path)
    assert isinstance(theirs[0], dict) and isinstance(ours[0], dict)
    flags = [outcome["sharing"]["failRequestsGreaterThanOne"] for outcome in (theirs[0], ours[0])]
    assert flags == [True, False]
    assert known_difference(MPS_EXPLICIT_FALSE, theirs, ours) == KNOWN[-1][0]
    assert compare({path: MPS_EXPLICIT_FALSE}) == []
    # Any other disagreement on the same file is not covered by that entry.
    for key, other in (("replicas", 3), ("announced", "nvidia.com/gpu.shared")):
        resources = [{**ours[0]["sharing"]["resources"][0], key: other}]
        skewed = ({**ours[0], "sharing": {**ours[0]["sharing"], "resources": resources}}, "")
        assert known_difference(MPS_EXPLICIT_FALSE, theirs, skewed) is None
    assert known_difference(MPS_EXPLICIT_FALSE, theirs, ({**ours[0], "migStrategy": "single"}, "")) is None


@pytest.mark.parametrize("text", ["", " \n\n", "null\n", "~\n", "---\n", "# nothing set yet\n", "{}\n"])
def test_empty_files_read_alike(tmp_path: Path, text: str) -> None:
    """An empty config file (no bytes, whitespace, a comment, a null document) starts both readers
    with every default (NVIDIA's since v0.12.2, its CHANGELOG's "Allow an empty config file")."""
    path = tmp_path / "config.yaml"
    path.write_text(text)
    defaults = tmp_path / "defaults.yaml"
    defaults.write_text("version: v1\n")
    theirs = nvidia([path, defaults])
    assert compare({path: text}) == []
    assert theirs[path] == theirs[defaults] and gpuchain(path) == gpuchain(defaults)
