"""The typed α-β fits records (`mpiatlas.models.alphabeta_records`): alphabeta.json keeps the layout it
had before the records (key order, nulls, keys an older file leaves out), goes through the records to
the same bytes, and a bad entry is named by file and key."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from mpiatlas.models.alphabeta import GROUP_KEYS, fit_alphabeta_table
from mpiatlas.models.alphabeta_models import coefficients
from mpiatlas.models.alphabeta_records import SERIES_KEYS, AlphaBetaFits, AlphaBetaRecord, Network, document_network
from mpiatlas.models.fit_records import FitRecordError
from mpiatlas.models.fits import Fits, read_fits, write_fits
from mpiatlas.models.fits_files import dumps, validate
from mpiatlas.tables.samples import SERIES_AXES

NET = Network("veth", 10.0)
SIZES = [2**k for k in range(4, 21, 2)]
ALPHA, BETA = 1.6, 25.0


def _samples() -> pl.DataFrame:
    """Alltoall of one series at k = 1 and 2 over m = 1..3 (3 repetitions, 3 % noise: α = 1.6, β = 25 µs),
    and an Allgather series with one multi-node point (refused)."""
    rng = np.random.default_rng(7)
    rows = []
    for k in (1, 2):
        for m in (1, 2, 3):
            for x in SIZES:
                a, c = coefficients("alltoall", m, k, x, NET.bytes_per_us)
                rows += [{"benchmark": "Alltoall", "bytes": x, "nodes": m, "ppn": k, "np": m * k,
                          "mapping": "core" if m == 1 else "node",
                          "t_max_usec": float(ALPHA * a + BETA * c + (0.5 if m == 1 else 0.0))
                          * float(rng.lognormal(0.0, 0.03))} for _ in range(3)]
    rows += [{"benchmark": "Allgather", "bytes": 1024, "nodes": 2, "ppn": 2, "np": 4, "mapping": "node",
              "t_max_usec": 50.0}]
    return pl.DataFrame(rows).with_columns(pl.lit("ok").alias("status"), pl.lit("intelmpi").alias("stack"),
                                           pl.lit("ofi-tcp").alias("transport"), pl.lit("default").alias("algorithm"),
                                           pl.col("nodes", "ppn", "np").cast(pl.Int32))


# The keys of a fitted entry, in the order the writer before the records wrote them (series key and k,
# AlphaBetaFit.to_dict(), oversubscribed, fit_families()).
FITTED_KEYS = [*SERIES_KEYS, "benchmark", "ppn", "model", "formula", "bandwidth_gbit_s", "network", "alpha", "alpha_ci",
               "beta_us", "beta_ci_us", "n_points", "n_samples", "nodes", "r2", "rel_rms", "ci_method", "n_boot",
               "notes", "points", "oversubscribed", "models", "best_model", "selection", "distinct_mk", "per_size",
               "per_size_named"]


def test_the_document_keeps_its_layout_and_goes_through_the_records_to_the_same_bytes() -> None:
    result = fit_alphabeta_table(_samples(), NET)
    document = result.to_json()
    validate(document, "alphabeta", "<test>")
    assert list(document) == ["network", "time_column", "fits", "pooled", "notes"]
    refused, *fitted = sorted(result.fits, key=lambda f: (f.benchmark, f.ppn or 0))
    assert refused.benchmark == "Allgather" and refused.error is not None and "got 1" in refused.error
    assert list(refused.to_json().items()) == [
        ("stack", "intelmpi"), ("transport", "ofi-tcp"), ("algorithm", "default"), ("options", ""), ("knobs", ""),
        ("placement", "cyclic"), ("benchmark", "Allgather"), ("ppn", 2), ("model", "allgather_ring"),
        ("error", refused.error), ("notes", [])]
    assert [f.ppn for f in fitted] == [1, 2]
    for f in fitted:
        assert list(f.to_json()) == FITTED_KEYS
        assert f.alpha == pytest.approx(ALPHA, rel=0.05) and f.beta_us == pytest.approx(BETA, rel=0.15)
        assert f.families is not None and f.families.best_model == "alltoall"
        assert f.families.selection.best == "alltoall" and "alltoall" in f.families.selection.tied
        # m = 1 is shown, not fitted, and has no residual.
        assert [p.rel_err for p in f.points if p.nodes == 1] == [None] * len(SIZES)
    (pooled,) = result.pooled or ()
    assert pooled.ppns == (1, 2) and pooled.nodes == (2, 3) and pooled.to_json()["ppn"] is None
    text = dumps(document)
    again = AlphaBetaFits.from_json(json.loads(text))
    assert again == result  # frozen records: equal field by field
    assert dumps(again.to_json()) == text


def test_fits_files_round_trip_through_read_fits(tmp_path: Path) -> None:
    result = fit_alphabeta_table(_samples(), NET)
    assert [p.name for p in write_fits(Fits(alphabeta=result), tmp_path)] == ["alphabeta.json"]
    assert read_fits(tmp_path).alphabeta == result
    assert document_network(json.loads((tmp_path / "alphabeta.json").read_text())) == NET


def test_an_older_file_reads_and_writes_back_as_it_was() -> None:
    # Before the IMB options / knobs / placement axes, the model comparison and the pooled fits.
    old = {"network": {"name": "1GbE", "bandwidth_gbit_s": 1.0, "bandwidth_bytes_per_s": 1.25e8},
           "time_column": "t_max_usec else t_usec",
           "fits": [{"stack": "ompi", "transport": "tcp", "algorithm": "default", "benchmark": "Alltoall", "ppn": 1,
                     "model": "alltoall", "formula": "t = α · x · (m − 1) · k² / b + β", "bandwidth_gbit_s": 1.0,
                     "network": "1GbE", "alpha": 1.3, "alpha_ci": [1.2, None], "beta_us": 200.0,
                     "beta_ci_us": [180.0, 220.0], "n_points": 2, "n_samples": 2, "nodes": [2], "r2": None,
                     "rel_rms": 0.01, "ci_method": "residuals", "n_boot": 1000, "notes": [],
                     "points": [{"nodes": 2, "bytes": 1024, "used": True, "n_reps": 1, "measured_us": 210.0,
                                 "min_us": 210.0, "max_us": 210.0, "predicted_us": 210.6, "rel_err": 0.003,
                                 "speed_of_light_us": 8.2}]}],
           "notes": []}
    record = AlphaBetaFits.from_json(old)
    (fit,) = record.fits
    assert fit.cell_keys == ("stack", "transport", "algorithm") and fit.knobs is None and fit.families is None
    assert fit.alpha_ci == (1.2, None) and record.pooled is None
    assert dumps(record.to_json()) == dumps(old)


@pytest.mark.parametrize(("document", "said"), [
    ({"network": {"name": "x", "bandwidth_gbit_s": 0}, "fits": []},
     "alphabeta.json: $.network.bandwidth_gbit_s: network bandwidth must be a finite number > 0 Gbit/s, got 0"),
    ({"network": {"name": "x", "bandwidth_gbit_s": 1}, "fits": [{"ppn": 2}]},
     "alphabeta.json: $.fits[0].benchmark: required, a string"),
    ({"network": {"name": "x", "bandwidth_gbit_s": 1}, "fits": [{"benchmark": "Alltoall", "ppn": "2"}]},
     "alphabeta.json: $.fits[0].ppn: expected an integer or null, got '2'"),
    ({"network": {"name": "x", "bandwidth_gbit_s": 1},
      "fits": [{"benchmark": "Alltoall", "points": [{"nodes": 2, "bytes": 8, "used": "yes"}]}]},
     "alphabeta.json: $.fits[0].points[0].used: expected true, false or null, got 'yes'"),
    ({"network": {"name": "x", "bandwidth_gbit_s": 1},
      "fits": [{"benchmark": "Alltoall", "models": [{"model": "alltoall", "alpha_ci": [1.0]}]}]},
     "alphabeta.json: $.fits[0].models[0].alpha_ci: expected [low, high], got [1.0]"),
    ([1, 2], "alphabeta.json: $: expected a JSON object, got list"),
])
def test_a_bad_entry_is_named_by_file_and_key(document: object, said: str) -> None:
    with pytest.raises(FitRecordError) as err:
        AlphaBetaFits.from_json(document, "alphabeta.json")  # type: ignore[arg-type]
    assert str(err.value) == said


def test_the_series_key_is_the_group_keys_and_the_series_axes() -> None:
    # The records spell the key out (no polars there); the samples' axes are where it is defined.
    assert (*GROUP_KEYS, *SERIES_AXES) == SERIES_KEYS
    assert AlphaBetaRecord(benchmark="Alltoall", ppn=2, cell_keys=SERIES_KEYS).series_keys == {
        **dict.fromkeys(SERIES_KEYS), "benchmark": "Alltoall", "ppn": 2}
