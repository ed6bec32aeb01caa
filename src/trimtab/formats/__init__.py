"""Readers that turn outside formats (job traces, cluster descriptions) into model objects.

Owns FormatError, the one error every reader raises, the one YAML loader every reader of YAML uses (bounded: size,
documents, nesting, number length, aliases), and the small field parsers the readers share."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml


class FormatError(ValueError):
    """An input that cannot become model objects. The message names the source, line and field, e.g.

    "philly.csv line 17, field num_gpus: expected a positive integer, got 'x'".
    `source` is the file as the caller named it (or the spec string), `line` is 1-based and counts the header,
    `field` is the column or document path; each is None when it does not apply."""

    def __init__(self, source: str, problem: str, *, line: int | None = None, field: str | None = None) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.problem = problem
        where = source if line is None else f"{source} line {line}"
        if field is not None:
            where = f"{where}, field {field}"
        super().__init__(f"{where}: {problem}")


class YamlSyntaxError(FormatError):
    """Text that is not YAML at all: `line` is where the parser gave up, `detail` the parser's words (with the
    column). Callers that answer unreadable input differently from invalid content (the API: 400 rather than
    422) catch it; everyone else sees a FormatError."""

    def __init__(self, source: str, detail: str, line: int | None) -> None:
        super().__init__(source, f"not valid YAML: {detail}", line=line)
        self.detail = detail


@dataclass(frozen=True, slots=True)
class YamlLimits:
    """What loading one YAML text may cost. Each bound is checked while the text is parsed, before any value is
    built, so a text over a bound costs no more than reading up to it.

    `max_bytes` of text (characters), `max_documents` documents, `max_nodes` values in all and
    `max_document_nodes` in one document (scalars, mappings, sequences: what building them costs), `max_depth`
    nested mappings and sequences, `max_number_digits` characters in one integer (Python's int() of thousands of
    digits is slow, then refused).
    `aliases`: whether `*name` may repeat an anchored value; a few bytes of nested aliases stand for billions of
    values, so text from the network (the serve API) is read without them."""

    max_bytes: int = 1 << 30
    max_documents: int = 10_000_000
    max_nodes: int = 1 << 40
    max_document_nodes: int = 1 << 40
    max_depth: int = 100
    max_number_digits: int = 100
    aliases: bool = True


FILE_YAML = YamlLimits()  # files on this machine, named by their owner
_INT_TAG = "tag:yaml.org,2002:int"


def yaml_documents(text: str, source: str, limits: YamlLimits = FILE_YAML) -> list[tuple[int, int, Any]]:
    """`(number, line, data)` of every document of `text` (number and line 1-based; data None for an empty
    document), read by the one YAML loader (libyaml, safe types only). Raises YamlSyntaxError for text that is
    not YAML, FormatError naming the bound and where it was crossed for text over one of `limits`."""
    if len(text) > limits.max_bytes:
        raise FormatError(source, f"YAML text of {len(text)} characters is over the limit of {limits.max_bytes}")
    _check_events(text, source, limits)
    loader = yaml.CSafeLoader(text)
    out: list[tuple[int, int, Any]] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            line = node.start_mark.line + 1 if node is not None else 0
            out.append((len(out) + 1, line, loader.construct_document(node) if node is not None else None))
    except yaml.YAMLError as exc:
        raise _syntax_error(exc, text, source) from None
    finally:
        loader.dispose()
    return out


def yaml_document(text: str, source: str, limits: YamlLimits = FILE_YAML) -> Any:
    """The data of a text that holds one YAML document (None when it holds none), read by `yaml_documents`: the
    loader of every single-document file (profiles, fault and speed tables, the client's config). Raises as
    `yaml_documents` does, each error naming `source`, and FormatError for a text of several documents."""
    documents = yaml_documents(text, source, limits)
    if len(documents) > 1:
        raise FormatError(source, f"expected one YAML document, got {len(documents)}", line=documents[1][1])
    return documents[0][2] if documents else None


def _check_events(text: str, source: str, limits: YamlLimits) -> None:
    """Walk the parser's events once (no values built) and refuse the first thing over a bound."""
    loader = yaml.CSafeLoader(text)
    depth, documents, nodes, in_document = 0, 0, 0, 0
    try:
        while loader.check_event():
            event = loader.get_event()
            line = event.start_mark.line + 1
            if isinstance(event, yaml.NodeEvent):
                nodes, in_document = nodes + 1, in_document + 1
                if nodes > limits.max_nodes or in_document > limits.max_document_nodes:
                    over = f"{limits.max_nodes} YAML values in all" if nodes > limits.max_nodes else \
                        f"{limits.max_document_nodes} YAML values in one document"
                    raise FormatError(source, f"more than {over} (the limit), in document {documents}", line=line)
            if isinstance(event, yaml.DocumentStartEvent):
                documents, in_document = documents + 1, 0
                if documents > limits.max_documents:
                    raise FormatError(source, f"more than {limits.max_documents} YAML documents (the limit)",
                                      line=line)
            elif isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > limits.max_depth:
                    raise FormatError(source, f"YAML nested deeper than {limits.max_depth} levels (the limit), "
                                      f"in document {documents}", line=line)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent) and not limits.aliases:
                raise FormatError(source, f"YAML aliases (*{event.anchor}) are not accepted here: write the value "
                                  f"out (document {documents})", line=line)
            elif isinstance(event, yaml.ScalarEvent) and len(event.value) > limits.max_number_digits:
                tag = event.tag if event.tag not in (None, "!") else loader.resolve(
                    yaml.ScalarNode, event.value, event.implicit)
                if tag == _INT_TAG:
                    raise FormatError(source, f"a number of {len(event.value)} digits is over the limit of "
                                      f"{limits.max_number_digits} (document {documents})", line=line)
    except yaml.YAMLError as exc:
        raise _syntax_error(exc, text, source) from None
    finally:
        loader.dispose()


def _syntax_error(exc: yaml.YAMLError, text: str, source: str) -> YamlSyntaxError:
    """The parser's error, at its line; libyaml marks the end of the text one line past the last one."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is None:
        return YamlSyntaxError(source, problem, None)
    line = min(mark.line + 1, text.count("\n") + 1)
    return YamlSyntaxError(source, f"column {mark.column + 1}: {problem}", line)


def _open_text(path: Path, source: str) -> TextIO:
    """Open `path` for csv reading (utf-8, a BOM dropped); a missing or unreadable file is a FormatError."""
    try:
        return path.open(encoding="utf-8-sig", newline="")
    except FileNotFoundError:
        raise FormatError(source, "no such file") from None
    except OSError as exc:
        raise FormatError(source, f"cannot read: {exc.strerror or exc}") from None


class _CsvTable:
    """A header-led CSV file: checks the header once, then yields `(line, row)` for every non-blank record.

    Every yielded row has exactly as many fields as the header; `col[name]` is a column's index (-1 when an optional
    column is absent). Errors name the file and the physical line."""

    def __init__(self, stream: TextIO, source: str, required: Sequence[str], optional: Sequence[str] = ()) -> None:
        self.source = source
        self._reader = csv.reader(stream)
        header = next(self._reader, None)
        if not header:
            raise FormatError(source, f"empty file; expected a header line with {','.join(required)}", line=1)
        self.header = [name.strip() for name in header]
        missing = [name for name in required if name not in self.header]
        if missing:
            raise FormatError(
                source,
                f"missing column(s) {', '.join(missing)}; the header has {','.join(self.header)}",
                line=1,
            )
        self.col = {name: self.header.index(name) if name in self.header else -1 for name in (*required, *optional)}

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        width = len(self.header)
        reader = self._reader
        try:
            for row in reader:
                if len(row) != width:
                    if not row or (len(row) == 1 and not row[0].strip()):
                        continue  # blank line, e.g. a trailing one
                    raise FormatError(
                        self.source, f"expected {width} fields like the header, got {len(row)}", line=reader.line_num
                    )
                yield reader.line_num, row
        except csv.Error as exc:
            raise FormatError(self.source, f"malformed CSV: {exc}", line=reader.line_num) from None


def _parse_int(text: str, source: str, line: int | None, field: str, minimum: int) -> int:
    """`text` as an integer >= `minimum` (0 or 1); "4.0" is accepted as 4. Anything else is a FormatError."""
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        value = int(number) if number.is_integer() else minimum - 1
    if value < minimum:
        kind = "a positive integer" if minimum >= 1 else "a non-negative integer"
        raise FormatError(source, f"expected {kind}, got {text!r}", line=line, field=field)
    return value


def _parse_seconds(text: str, source: str, line: int | None, field: str, *, signed: bool = False) -> float:
    """`text` as a finite number of seconds, >= 0 unless `signed`. Anything else is a FormatError."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (value < 0 and not signed):
        kind = "a number of seconds" if signed else "a non-negative number of seconds"
        raise FormatError(source, f"expected {kind}, got {text!r}", line=line, field=field)
    return value


# The readers import FormatError and the helpers above from this package, so they are imported last.
from trimtab.formats.cluster import load_cluster  # noqa: E402
from trimtab.formats.traces import TRACE_FORMATS, load_trace, write_csv  # noqa: E402

__all__ = ["FILE_YAML", "TRACE_FORMATS", "FormatError", "YamlLimits", "YamlSyntaxError", "load_cluster", "load_trace",
           "write_csv", "yaml_document", "yaml_documents"]
