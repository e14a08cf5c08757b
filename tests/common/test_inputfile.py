"""The one input reader: every bad file is one line naming file, line, field and fix (issue 15, 3/4).

The bad inputs are those of the fault campaign: a NUL byte, non-UTF-8 and UTF-16 text,
5,000-deep nesting, a FIFO, an empty or ``null`` file, duplicate keys.
"""

from __future__ import annotations

import codecs
import os
import threading
from pathlib import Path

import pytest
from pydantic import BaseModel

from gpuchain.common.inputfile import ConfigFileError, read_input_text
from gpuchain.common.yamlfile import MAX_DEPTH, load_yaml_file, load_yaml_model


class Doc(BaseModel):
    a: int = 1
    b: dict[str, object] = {}


def _err(path: Path) -> str:
    with pytest.raises(ConfigFileError) as info:
        load_yaml_file(Doc, path=path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


def test_a_fifo_is_refused_at_once_not_read_forever(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    result: list[BaseException | str] = []

    def read() -> None:
        try:
            result.append(read_input_text(fifo))
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "reading a FIFO blocked"
    (outcome,) = result
    assert isinstance(outcome, ConfigFileError)
    assert str(outcome) == f"{fifo}: is a FIFO (named pipe), not a regular file; give the path of a file"


def test_a_directory_and_a_missing_file(tmp_path: Path) -> None:
    assert "is a directory" in _err(tmp_path)
    assert "cannot read file: No such file or directory" in _err(tmp_path / "nope.yaml")


def test_nul_byte_names_its_line(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_bytes(b"a: 1\nb:\n  x: \x00\n")
    assert _err(p) == f"{p}:3: contains a NUL byte (a binary or corrupted file); give a text file"


def test_non_utf8_names_line_and_byte(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_bytes(b"a: 1\nb: {x: caf\xe9}\n")
    assert _err(p) == f"{p}:2: is not UTF-8 (byte 0xe9); save it as UTF-8 text"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_are_named(tmp_path: Path, encoding: str) -> None:
    p = tmp_path / "c.yaml"
    data = "a: 1\n".encode(encoding)
    if encoding == "utf-16-be":
        data = codecs.BOM_UTF16_BE + data
    p.write_bytes(data)
    name = "UTF-32" if "32" in encoding else "UTF-16"
    assert _err(p) == f"{p}:1: is {name} text; save it as UTF-8 (e.g. iconv -f {name} -t UTF-8)"


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_bytes(codecs.BOM_UTF8 + b"a: 3\n")
    assert load_yaml_file(Doc, path=p).a == 3


def test_deep_nesting_is_refused_without_recursion(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("b: " + "[" * 5000 + "]" * 5000 + "\n")
    assert f"nested more than {MAX_DEPTH} levels deep" in _err(p)
    p.write_text("b:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)))
    assert f"nested more than {MAX_DEPTH} levels deep" in _err(p)


def test_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 40)]
    p = tmp_path / "c.yaml"
    p.write_text("b:\n" + "\n".join("  " + line for line in lines) + "\n")
    assert "aliases; write the values out" in _err(p)


def test_duplicate_key_names_both_lines(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("a: 1\nb:\n  x: 1\n  x: 2\n")
    assert _err(p) == f"{p}:4: x: duplicate key (first at line 3); keep only one"


def test_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("base: &base {x: 1}\nb:\n  <<: *base\n  y: 2\n")
    assert load_yaml_file(Doc, path=p).b == {"x": 1, "y": 2}


@pytest.mark.parametrize("text", ["", "\n# only a comment\n", "null\n", "~\n", "---\n"])
def test_empty_or_null_file_is_refused(tmp_path: Path, text: str) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    assert _err(p) == f"{p}:1: the file is empty (or null); give the settings, or '{{}}' for every default"


def test_empty_file_is_every_default_when_the_format_says_so(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("")
    assert load_yaml_file(Doc, path=p, empty_ok=True) == Doc()
    p.write_text("{}\n")
    assert load_yaml_file(Doc, path=p) == Doc()


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_bytes(b"a: 1\n" + b"#" * 5000)
    with pytest.raises(ConfigFileError, match="is larger than 4 KiB"):
        read_input_text(p, max_bytes=4096)


def test_huge_integer_and_multiple_documents_are_one_line_errors() -> None:
    with pytest.raises(ConfigFileError, match="not valid YAML"):
        load_yaml_model(Doc, text="a: " + "9" * 5000)
    with pytest.raises(
        ConfigFileError, match="not valid YAML: but found another document \\(expected a single document"
    ):
        load_yaml_model(Doc, text="a: 1\n---\na: 2\n")


def test_symlinked_configmap_file_is_read(tmp_path: Path) -> None:
    """A mounted ConfigMap is a symlink chain (key -> ..data/key): it is a regular file to read."""
    data = tmp_path / "..2024_01_01" / "config.yaml"
    data.parent.mkdir()
    data.write_text("a: 5\n")
    (tmp_path / "..data").symlink_to(data.parent.name)
    (tmp_path / "config.yaml").symlink_to("..data/config.yaml")
    assert load_yaml_file(Doc, path=tmp_path / "config.yaml").a == 5


def test_control_characters_are_named_with_their_line() -> None:
    """Found by tests/fuzz: PyYAML raised ReaderError from its constructor, outside the handler."""
    with pytest.raises(ConfigFileError) as info:
        load_yaml_model(Doc, text="a: 1\nb: \x01\n", source="c.yaml")
    assert str(info.value) == "c.yaml:2: contains the control character U+0001; YAML files hold printable text only"
