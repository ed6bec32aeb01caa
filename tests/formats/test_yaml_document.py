"""Every single-document YAML file a user names (a profile, a fault spec and its schedule file, a speed table, the
client's config) is read by the one bounded loader (`formats.yaml_document`): bad YAML, several documents and text
over a bound are refused with an error naming the file and line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from trimtab.formats import FormatError, YamlLimits, yaml_document
from trimtab.profile import Profile
from trimtab.serve.http.client import read_config
from trimtab.sim.faults import FaultSpec
from trimtab.sim.speed import GpuThroughputs


def _schedule_file(path: Path) -> None:
    spec = path.parent / "faults.yaml"
    spec.write_text(f"schedule-file: {path.name}\n")
    FaultSpec.parse(str(spec))


READERS: dict[str, Callable[[Path], object]] = {
    "profile": lambda path: Profile.load(path),
    "faults": lambda path: FaultSpec.parse(str(path)),
    "fault schedule": _schedule_file,
    "speed table": lambda path: GpuThroughputs.load(path),
    "client config": read_config,
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(("text", "problem"), [
    ("a: [1, 2\nb: 3\n", r"line \d: not valid YAML: column \d+"),
    ("a: 1\n---\nb: 2\n", "line 3: expected one YAML document, got 2"),
    ("a: " + "[" * 150 + "]" * 150 + "\n", "line 1: YAML nested deeper than 100 levels"),
])
def test_a_bad_yaml_file_is_refused_naming_the_file_and_line(tmp_path: Path, reader: str, text: str,
                                                             problem: str) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem) as err:
        READERS[reader](path)
    assert str(path) in str(err.value)


def test_one_document_is_its_data_and_an_empty_text_none() -> None:
    assert yaml_document("a: 1\n", "x.yaml") == {"a": 1}
    assert yaml_document("", "x.yaml") is None
    with pytest.raises(FormatError, match=r"x\.yaml line 2: YAML aliases"):
        yaml_document("a: &x 1\nb: *x\n", "x.yaml", YamlLimits(aliases=False))
