"""Which reader takes an imported file: the OSU-vs-IMB dispatch rule in one place.

* a ``.csv`` file is a CSV export (:mod:`mpiatlas.parsers.osu_csv`; IMB never writes CSV), so a
  CSV that is no OSU export fails with the column it does not know, not with an IMB complaint;
* a text with an OSU banner (``# OSU MPI ... Test vX``) and no ``Intel(R) MPI Benchmarks``
  banner is OSU output (:mod:`mpiatlas.parsers.osu`);
* anything else is left to the IMB parser, whose errors name the file and line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import polars as pl

from mpiatlas.parsers.osu import OsuParseError, is_osu_text, parse_osu_text
from mpiatlas.parsers.osu_csv import parse_osu_csv_text

__all__ = ["OsuKind", "osu_kind", "parse_osu_input"]

OsuKind = Literal["text", "csv"]


def osu_kind(path: str | Path, text: str) -> OsuKind | None:
    """``"csv"``, ``"text"``, or None for input the IMB parser should read."""
    if str(path)[-4:].lower() == ".csv":  # a Path object per file costs more than the test itself
        return "csv"
    return "text" if is_osu_text(text) else None


def parse_osu_input(
    path: str | Path, text: str, *, processes: int | None = None, algorithm: str | None = None
) -> pl.DataFrame:
    """Rows of an OSU text output or CSV export in :data:`mpiatlas.parsers.osu.OSU_SCHEMA`.

    ``processes``: rank count of OSU collective text output (OSU does not print it).
    ``algorithm``: replaces a CSV export's algorithm label. Raises :class:`OsuParseError`,
    also for input that is not OSU (check :func:`osu_kind` first to route IMB output).
    """
    kind = osu_kind(path, text)
    if kind == "csv":
        return parse_osu_csv_text(text, path, algorithm=algorithm)
    if kind == "text":
        return parse_osu_text(text, str(path), processes=processes)
    raise OsuParseError(str(path), 1, "not OSU output: no '# OSU MPI ... Test vX' banner (or an IMB banner too)")
