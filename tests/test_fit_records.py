"""The typed fits records (`mpiatlas.models.fit_records`): a Hockney fit made from real samples is
written as the same bytes after a trip through its record, and a bad entry is named by file and key."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from mpiatlas.models.fit_records import FitRecordError, HockneyRecord, hockney_document, hockney_records
from mpiatlas.models.fits import read_fits, write_fits, Fits
from mpiatlas.models.fits_files import dumps, validate
from mpiatlas.models.hockney import HockneyFit, fit_hockney, fit_hockney_table

SIZES = [2**k for k in range(23)]


def _samples() -> pl.DataFrame:
    """Two cells' PingPong (λ = 1 and 3 µs, B = 8000 and 2000 MB/s, 1 % noise, 3 launches) and a
    PingPing group too small to fit."""
    rng = np.random.default_rng(3)
    rows = [{"label": label, "stack": "impi", "transport": transport, "mapping": "core", "np": 2,
             "algorithm": None, "benchmark": "PingPong", "bytes": s, "rep": rep,
             "t_usec": (lam + s / bw) * (1.0 + 0.01 * rng.standard_normal())}
            for label, transport, lam, bw in (("impi/shm/core", "shm", 1.0, 8000.0), ("impi/tcp/core", "tcp", 3.0, 2000.0))
            for rep in range(3) for s in SIZES]
    rows += [{"label": "impi/shm/core", "stack": "impi", "transport": "shm", "mapping": "core", "np": 2,
              "algorithm": None, "benchmark": "PingPing", "bytes": s, "rep": 0, "t_usec": 1.0} for s in (1, 2)]
    return pl.DataFrame(rows)


KEYS = ["label", "stack", "transport", "mapping", "np", "algorithm"]


def test_a_fit_record_is_the_entry_it_was_before_records_byte_for_byte() -> None:
    samples = _samples()
    records = fit_hockney_table(samples, KEYS, seed=4)
    assert [(r.label, r.benchmark, r.fitted) for r in records] == [
        ("impi/shm/core", "PingPong", True), ("impi/tcp/core", "PingPong", True), ("impi/shm/core", "PingPing", False)]
    # The entry as written before the records: the cell key, then HockneyFit.to_dict().
    first = samples.filter((pl.col("label") == "impi/shm/core") & (pl.col("benchmark") == "PingPong"))
    fit = fit_hockney(first["bytes"].to_list(), first["t_usec"].to_list(),
                      launches=first["rep"].cast(pl.String).to_list(), seed=4)
    cell = {"label": "impi/shm/core", "stack": "impi", "transport": "shm", "mapping": "core", "np": 2,
            "algorithm": None, "benchmark": "PingPong"}
    assert dumps(records[0].to_json()) == dumps({**cell, **fit.to_dict()})
    assert records[0].latency_us == pytest.approx(1.0, rel=0.05)
    assert records[0].model_bandwidth_MBps == pytest.approx(8000.0, rel=0.05)
    assert records[1].latency_us == pytest.approx(3.0, rel=0.05)
    # File text -> records -> file text: the same bytes; and the model evaluates as the fit does.
    text = dumps(hockney_document(records))
    validate(json.loads(text), "hockney", "<test>")
    assert dumps(hockney_document(hockney_records(json.loads(text)))) == text
    back = HockneyFit.from_record(records[0])
    assert back.predict(SIZES) == pytest.approx(fit.predict(SIZES))


def test_fits_files_round_trip_through_read_fits(tmp_path: Path) -> None:
    records = fit_hockney_table(_samples(), ["label"], seed=1)
    assert records[0].cell_keys == ("label",) and records[0].stack is None
    written = write_fits(Fits(hockney=records), tmp_path)
    assert [p.name for p in written] == ["hockney.json"]
    again = read_fits(tmp_path)
    assert again.hockney == records  # frozen records: equal field by field
    assert (tmp_path / "hockney.json").read_text() == dumps(hockney_document(again.hockney or []))


def test_an_unbounded_bandwidth_is_none_in_the_record_and_inf_in_the_model() -> None:
    sizes = np.array(SIZES, dtype=float)
    (record,) = fit_hockney_table(pl.DataFrame({"label": "flat", "benchmark": "PingPong", "bytes": sizes,
                                                "t_usec": np.full(sizes.shape, 2.0)}), ["label"])
    assert record.segments[-1].bandwidth_MBps is None and record.model_bandwidth_MBps is None
    assert record.to_json()["segments"][-1]["bandwidth_MBps"] is None  # type: ignore[index,call-overload]
    assert math.isinf(HockneyFit.from_record(record).segments[-1].bandwidth_MBps or 0.0)


@pytest.mark.parametrize(("entry", "said"), [
    ({"label": "a"}, "hockney.json: $[0].benchmark: required, a string"),
    ({"label": "a", "benchmark": "PingPong", "np": "2"}, "hockney.json: $[0].np: expected an integer or null, got '2'"),
    ({"label": "a", "benchmark": "PingPong", "latency_us": "1.0"},
     "hockney.json: $[0].latency_us: expected a number or null, got '1.0'"),
    ({"label": "a", "benchmark": "PingPong", "latency_ci_us": [1.0]},
     "hockney.json: $[0].latency_ci_us: expected [low, high], got [1.0]"),
    ({"label": "a", "benchmark": "PingPong", "segments": [{"bandwidth_MBps": 5.0}]},
     "hockney.json: $[0].segments[0].latency_us: required, a number"),
    ({"label": "a", "benchmark": "PingPong", "breakpoints_bytes": [1024, 2.5]},
     "hockney.json: $[0].breakpoints_bytes[1]: expected an integer, got 2.5"),
    ("PingPong", "hockney.json: $[0]: expected a JSON object, got str"),
])
def test_a_bad_entry_is_named_by_file_and_key(entry: object, said: str) -> None:
    with pytest.raises(FitRecordError) as err:
        hockney_records([entry], "hockney.json")  # type: ignore[list-item]
    assert str(err.value) == said


def test_a_document_that_is_not_an_array_is_refused() -> None:
    with pytest.raises(FitRecordError, match=r"^fits/hockney.json: \$: expected an array of Hockney fits, got dict$"):
        hockney_records({"fits": []}, "fits/hockney.json")
    assert HockneyRecord.from_json({"benchmark": "PingPong", "error": "too few sizes"}).to_json() == {
        "benchmark": "PingPong", "error": "too few sizes"}
