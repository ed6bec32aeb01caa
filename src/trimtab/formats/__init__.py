"""Readers that turn outside formats (job traces, cluster descriptions) into model objects.

Owns FormatError, the one error every reader raises, and the small field parsers the readers share."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO


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

__all__ = ["TRACE_FORMATS", "FormatError", "load_cluster", "load_trace", "write_csv"]
