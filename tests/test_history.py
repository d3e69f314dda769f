"""mpiatlas history on real data: ORFEO's Feb-2024 osu_scatter runs as "weeks".

zampar-orfeo-osu-bcast-barrier/history_66c4420/Excercise_1/scatter/results holds four runs of the
same sweep (3 mappings × np 2..48 × 21 sizes, Open MPI 4.1.5, one value per point). Its PROVENANCE
says their scripts set the *bcast* algorithm knob, so every file is Open MPI's default scatter:
four repeat runs, the run-to-run variation of that machine. Each week is one file with its
Algorithm column set to Default accordingly (otherwise four algorithm names make four series).
Week 3 "slow" is the binomial-named run with the latencies of 128 KiB and more multiplied by 1.3.
"""

from __future__ import annotations

import csv
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from altair.utils.schemapi import validate_jsonschema
from altair.vegalite.v6.schema.core import load_schema

from campaign_fixtures import Campaign
from conftest import require_datasets
from mpiatlas.cli import main
from mpiatlas.history.check import figures_frame
from mpiatlas.history.entry import BANDWIDTH, LATENCY, build_entry
from mpiatlas.history.record import record_campaign
from mpiatlas.history.store import DEFAULT_DB, SERIES_FIELDS, Entry, Figure, FigureRow, SeriesIdentity, open_store
from mpiatlas.report.build import build_report
from mpiatlas.report.charts import chart_spec
from mpiatlas.report.sections.history import trend_chart

SCATTER = "zampar-orfeo-osu-bcast-barrier/history_66c4420/Excercise_1/scatter/results"
LARGE = 128 * 1024
SLOWER = 1.3
# (week, source run, factor on the large sizes, date)
WEEKS = {"w1": ("default", 1.0, "2024-02-05"), "w2": ("basic_linear", 1.0, "2024-02-12"),
         "w3": ("binomial", 1.0, "2024-02-19"), "w3slow": ("binomial", SLOWER, "2024-02-19")}
SERIES = 3 * 47  # mappings × process counts


def write_week(src: Path, out: Path, factor: float) -> None:
    rows = list(csv.reader(src.open()))
    with out.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(rows[0])  # Algorithm,Allocation,Processes,MessageSize,Latency
        for row in rows[1:]:
            row[0] = "Default"
            if int(row[3]) >= LARGE:
                row[4] = f"{float(row[4]) * factor:.2f}"
            writer.writerow(row)


@pytest.fixture(scope="module")
def weeks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_weeks(tmp_path_factory.mktemp("weeks"))


def make_weeks(root: Path) -> dict[str, Path]:
    """week -> a directory written by `mpiatlas import` (label orfeo-thin)."""
    source = require_datasets() / SCATTER
    root.mkdir(parents=True, exist_ok=True)
    out = {}
    for week, (run, factor, _) in WEEKS.items():
        csv_path = root / f"{week}_scatter.csv"  # "scatter" in the name: the collective of the rows
        write_week(source / f"scatter_{run}.csv", csv_path, factor)
        assert main(["import", str(csv_path), "--label", "orfeo-thin", "--out", str(root / week)]) == 0
        out[week] = root / week
    return out


def history(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["history", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def add_weeks(db: Path, weeks: dict[str, Path], names: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    for name in names:
        code, out, _ = history("add", str(weeks[name]), "--db", str(db), "--date", WEEKS[name][2], capsys=capsys)
        assert code == 0 and out.startswith("added entry"), out


def test_two_quiet_weeks_pass_and_so_does_a_quiet_third(weeks: dict[str, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "history.sqlite"
    add_weeks(db, weeks, ["w1", "w2"], capsys)
    code, out, _ = history("check", "--db", str(db), capsys=capsys)
    assert code == 0, out
    assert f"0 of 0 series judged worse; {SERIES} series not judged" in out  # one earlier entry: no spread yet
    add_weeks(db, weeks, ["w3"], capsys)
    code, out, _ = history("check", "--db", str(db), "--json", capsys=capsys)
    result = json.loads(out)
    assert code == 0 and result["alarms"] == [], result["alarms"][:2]
    assert result["judged_series"] == SERIES and result["not_judged_series"] == 0


def test_a_third_week_slower_at_large_sizes_alarms_naming_series_and_sizes(
        weeks: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "history.sqlite"
    add_weeks(db, weeks, ["w1", "w2", "w3slow"], capsys)
    code, out, _ = history("check", "--db", str(db), capsys=capsys)
    assert code == 1
    assert out.startswith("test: per series and size: ln(new)")  # the test is stated
    assert "WORSE orfeo-thin core Scatter np=" in out and "median time (µs): sizes " in out
    code, out, _ = history("check", "--db", str(db), "--json", capsys=capsys)
    alarms = json.loads(out)["alarms"]
    assert code == 1 and len(alarms) >= 20, len(alarms)
    points = [p for a in alarms for p in a["points"]]
    # Only the slowed sizes, and by about what was done to them (the quiet run's own wander on top).
    assert min(p["bytes"] for p in points) >= LARGE
    quiet = {(r["mapping"], r["np"], r["bytes"]): r["t_usec"] for r in
             pl.read_parquet(weeks["w3"] / "imb_samples.parquet").iter_rows(named=True)}
    for alarm in alarms:
        series = alarm["series"]
        for p in alarm["points"]:  # the new value is the quiet run's, 1.3x (CSV rounding: 2 decimals)
            assert p["new"] == pytest.approx(SLOWER * quiet[series["mapping"], series["np"], p["bytes"]], abs=0.006)
    ratios = sorted(p["ratio"] for p in points)
    assert 1.2 < ratios[len(ratios) // 2] < 1.45 and ratios[0] > 1.05, (ratios[:3], ratios[-3:])
    assert all(a["series"]["benchmark"] == "Scatter" and a["series"]["system"] == "orfeo-thin" for a in alarms)
    assert all(p["old_interval"][1] < p["new"] for p in points)  # beyond the prediction interval
    # Without the slow-down the same week passes (previous test): the alarms are the 1.3x, not the run.


def test_same_data_twice_is_a_noop_that_says_so(weeks: dict[str, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "history.sqlite"
    add_weeks(db, weeks, ["w1"], capsys)
    code, out, _ = history("add", str(weeks["w1"]), "--db", str(db), "--label", "again", capsys=capsys)
    assert code == 0 and "already in" in out and "nothing added" in out
    with open_store(db, create=False) as store:
        assert len(store.entries()) == 1
        assert len(store.figures()) == SERIES * 21


def test_show_prints_a_series_over_time(weeks: dict[str, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "history.sqlite"
    add_weeks(db, weeks, ["w1", "w2"], capsys)
    code, out, _ = history("show", "node Scatter np=48 ", "--db", str(db), "--all", capsys=capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "orfeo-thin node Scatter np=48 median time (µs)"
    one_mib = [line for line in lines if " 1 MiB" in line]
    source = pl.read_parquet(weeks["w1"] / "imb_samples.parquet").filter(
        (pl.col("mapping") == "node") & (pl.col("np") == 48) & (pl.col("bytes") == 1 << 20))
    assert len(one_mib) == 2 and one_mib[0].split()[0] == "2024-02-05"
    assert float(one_mib[0].split()[5]) == pytest.approx(source["t_usec"][0], rel=1e-3)


def test_an_import_without_fits_is_fitted_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pingpong = require_datasets() / "local-imb-samples" / "impi_np2_PingPong.txt"
    assert main(["import", str(pingpong), "--label", "local", "--out", str(tmp_path / "imp")]) == 0
    entry = build_entry(tmp_path / "imp")
    fits = json.loads((tmp_path / "imp" / "fits" / "hockney.json").read_text())  # written by the add
    fitted = {f["benchmark"]: f for f in fits if "error" not in f}
    params = {f.series[-1]: f for f in entry.figures or [] if f.bytes is None}
    assert params[LATENCY].value == fitted["PingPong"]["latency_us"]
    assert params[LATENCY].ci_low == fitted["PingPong"]["latency_ci_us"][0]
    assert BANDWIDTH in params and params[BANDWIDTH].value > 0
    assert any("fitted here" in n for n in entry.notes or [])
    db = tmp_path / "h.sqlite"
    code, out, _ = history("add", str(tmp_path / "imp"), "--db", str(db), capsys=capsys)
    assert code == 0 and "added entry 1" in out
    series = dict(sqlite3.connect(db).execute("SELECT parameter, count(*) FROM series GROUP BY parameter").fetchall())
    assert series[LATENCY] == 1 and series["t_median_usec"] == 1  # one PingPong series, np=2


# -- safety of the store ---------------------------------------------------------------------

# A child that adds an import directory's entry and, inside the transaction, says so after each batch
# of figures and then waits: the parent acts (kill -9, a second adder) while the write is under way.
SLOW_ADDER = """
import sys, time
from pathlib import Path
from mpiatlas.history.check import figures_frame
from mpiatlas.history.entry import build_entry
from mpiatlas.history.store import DEFAULT_DB, open_store
from mpiatlas.report.build import build_report
from mpiatlas.report.charts import chart_spec
from mpiatlas.report.sections.history import trend_chart

entry = build_entry(Path(sys.argv[2]), date=sys.argv[4])

def progress(n):
    print(f"written {n}", flush=True)
    time.sleep(float(sys.argv[3]))

with open_store(Path(sys.argv[1])) as store:
    result = store.add(entry, progress=progress)
print("committed", result.entry_id, flush=True)
"""


def slow_adder(tmp_path: Path, db: Path, directory: Path, pause_s: float) -> subprocess.Popen[str]:
    script = tmp_path / "slow_adder.py"
    script.write_text(SLOW_ADDER)
    return subprocess.Popen([sys.executable, str(script), str(db), str(directory), str(pause_s), "2024-01-01"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_kill_9_during_a_write_leaves_the_store_whole_without_the_entry(weeks: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    child = slow_adder(tmp_path, db, weeks["w1"], pause_s=30.0)
    assert child.stdout is not None
    first = child.stdout.readline()  # 500 of its 2961 figures inserted, the transaction open
    assert first.strip() == "written 500", first + (child.stderr.read() if child.stderr else "")
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert conn.execute("SELECT count(*) FROM entries").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM figures").fetchone() == (0,)
    conn.close()
    with open_store(db) as store:  # and it takes the entry whole afterwards
        assert store.add(build_entry(weeks["w1"], date="2024-01-01")).figures == SERIES * 21
        assert len(store.figures()) == SERIES * 21


def test_two_adders_at_once_both_land(weeks: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    first = slow_adder(tmp_path, db, weeks["w1"], pause_s=0.3)  # holds the write lock ~2 s
    assert first.stdout is not None and first.stdout.readline().startswith("written")
    second = subprocess.run([sys.executable, "-m", "mpiatlas.cli", "history", "add", str(weeks["w2"]), "--db", str(db),
                             "--date", "2024-01-08"], capture_output=True, text=True, check=False)
    rest, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert second.returncode == 0, second.stderr
    assert "committed 1" in rest and "added entry 2" in second.stdout
    with open_store(db, create=False) as store:
        assert [e["date"][:10] for e in store.entries()] == ["2024-01-01", "2024-01-08"]
        assert len(store.figures()) == 2 * SERIES * 21


def test_a_file_that_is_not_a_store_is_refused_and_left_as_it_is(weeks: dict[str, Path], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "notes.sqlite"
    text.write_text("my notes, not a database\n" * 100)
    before = text.read_bytes()
    code, _, err = history("add", str(weeks["w1"]), "--db", str(text), capsys=capsys)
    assert code == 2 and "not an SQLite database" in err and str(text) in err
    assert text.read_bytes() == before
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).executescript("CREATE TABLE jobs (id INTEGER); INSERT INTO jobs VALUES (1);")
    before = other.read_bytes()
    code, _, err = history("list", "--db", str(other), capsys=capsys)
    assert code == 2 and "not an mpiatlas history store" in err and "jobs" in err
    assert other.read_bytes() == before


def test_a_figure_reads_back_with_its_whole_series_identity(tmp_path: Path) -> None:
    # FigureRow repeats SeriesIdentity's fields (a NamedTuple takes none from another): a field added to one and
    # not the other, or to both and not to the series table, fails here; figures_frame takes its columns from the row.
    series = SeriesIdentity("orfeo", "ompi", "4.1.5", "ucx", "core", "Scatter", "binomial", "eager", 8, "latency")
    first = FigureRow._fields.index(SERIES_FIELDS[0])
    assert FigureRow._fields[first:first + len(SERIES_FIELDS)] == SERIES_FIELDS
    assert {name: FigureRow.__annotations__[name] for name in SERIES_FIELDS} == SeriesIdentity.__annotations__
    with open_store(tmp_path / "history.sqlite") as store:
        store.add(Entry(source_key="k", source="week1", date="2024-01-01",
                        figures=[Figure(series, 1024, 2.5, 2.25, 3.0, 5)]))
        columns = [column[1] for column in store.conn.execute("PRAGMA table_info(series)")]
        [row] = store.figures()
    assert columns == ["id", "key", *SERIES_FIELDS]
    assert SeriesIdentity(*row[first:first + len(SERIES_FIELDS)]) == series
    frame = figures_frame([row])
    assert frame.select(SERIES_FIELDS).row(0) == tuple(series)
    assert frame.select("bytes", "value", "ci_low", "ci_high", "n").row(0) == (1024, 2.5, 2.25, 3.0, 5)
    assert frame.schema["np"] == pl.Int64 and frame.schema["label"] == pl.String and frame.schema["n"] == pl.Int64


def test_a_store_of_a_newer_schema_is_refused_and_left_as_it_is(weeks: dict[str, Path], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "history.sqlite"
    add_weeks(db, weeks, ["w1"], capsys)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = db.read_bytes()
    code, _, err = history("add", str(weeks["w2"]), "--db", str(db), capsys=capsys)
    assert code == 2 and "newer mpiatlas (history schema 99; this version reads up to 1)" in err
    code, _, err = history("check", "--db", str(db), capsys=capsys)
    assert code == 2 and "schema 99" in err
    assert db.read_bytes() == before


def test_a_campaign_whose_history_cannot_be_written_says_so_and_keeps_its_results(weeks: dict[str, Path],
                                                                                 tmp_path: Path) -> None:
    bad = tmp_path / "history.sqlite"
    bad.write_text("not a database")
    lines = record_campaign(weeks["w1"], bad)
    assert len(lines) == 1 and lines[0].startswith("history: not recorded (") and "not an SQLite database" in lines[0]
    assert (weeks["w1"] / "imb_samples.parquet").is_file()
    good = tmp_path / "good.sqlite"
    assert "added entry 1" in record_campaign(weeks["w1"], good)[0]
    assert "already entry 1" in record_campaign(weeks["w1"], good)[0]


# -- the report's section ----------------------------------------------------------------------


def history_report(root: Path, weeks: dict[str, Path]) -> Path:
    """A checkout whose results/ holds weeks 1 and 2 in its history store and week 3 (slow) as the
    campaign being reported: its report's History section judges week 3."""
    for week in ("w1", "w2", "w3slow"):
        tidy = root / "results" / week / "tidy"
        tidy.mkdir(parents=True)
        shutil.copy(weeks[week] / "imb_samples.parquet", tidy)
        # One config, re-run weekly: one system (the campaign's name).
        (root / "results" / week / "campaign.json").write_text(json.dumps({"campaign": {"name": "orfeo-thin"}}))
        # When it ran, as a campaign's provenance records it (the entry's date: its first cell's start).
        (tidy / "provenance.json").write_text(json.dumps([{"cell": week, "start": f"{WEEKS[week][2]}T10:00:00+00:00"}]))
    db = root / DEFAULT_DB
    for week in ("w1", "w2"):
        assert main(["history", "add", str(root / "results" / week), "--db", str(db)]) == 0
    campaign = root / "results" / "w3slow"
    return build_report(campaign / "tidy", campaign / "fits", campaign / "report.html", title="week 3")


def test_the_report_judges_the_campaign_against_the_history(weeks: dict[str, Path], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    page = history_report(tmp_path, weeks).read_text()
    section = page[page.index('id="history"'):]
    section = section[:section.index("</section>")]
    db = tmp_path / DEFAULT_DB
    # The same verdict as `history check` once week 3 is added.
    assert main(["history", "add", str(tmp_path / "results" / "w3slow"), "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["history", "check", "--db", str(db), "--json"]) == 1
    alarms = json.loads(capsys.readouterr().out)["alarms"]
    assert f"of its series judged (0 with fewer than 2 earlier entries are not), {len(alarms)} worse" in section
    assert section.count("orfeo-thin core Scatter np=") + section.count("orfeo-thin socket Scatter np=") + \
        section.count("orfeo-thin node Scatter np=") >= len(alarms)  # every alarm in the table
    assert section.count('class="vega-target"') == min(len(alarms), 12)


def test_the_trend_chart_is_valid_vega_lite(weeks: dict[str, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "history.sqlite"
    add_weeks(db, weeks, ["w1", "w2", "w3slow"], capsys)
    with open_store(db, create=False) as store:
        figures = figures_frame(store.figures())
    key = figures.filter((pl.col("mapping") == "node") & (pl.col("np") == 48))["series"][0]
    spec = chart_spec(trend_chart(figures, f"{key}\x1e{1 << 20}", expected=(600.0, 700.0)))
    assert validate_jsonschema(spec, load_schema(), raise_error=False) is None
    dates = sorted(row["date"] for layer in spec["layer"][1:] for row in spec["datasets"][layer["data"]["name"]])
    assert dates == sorted(["2024-02-05", "2024-02-12", "2024-02-19"] * 2)  # the rules and the points


def test_a_partial_campaign_adds_what_ran_and_says_so(weeks: dict[str, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    campaign = tmp_path / "results" / "c"
    (campaign / "partial" / "tidy").mkdir(parents=True)
    samples = pl.read_parquet(weeks["w1"] / "imb_samples.parquet")
    samples.filter(pl.col("mapping") == "core").write_parquet(campaign / "partial" / "tidy" / "imb_samples.parquet")
    db = tmp_path / "history.sqlite"
    code, out, err = history("add", str(campaign), "--db", str(db), "--date", "2024-03-01", capsys=capsys)
    assert code == 0 and out.startswith("added partial entry 1") and f"{47 * 21} figures of 47 series" in out
    assert "note: partial campaign: only the cells that ran" in err
    # The campaign finished later: its complete entry replaces the partial one.
    (campaign / "tidy").mkdir()
    samples.write_parquet(campaign / "tidy" / "imb_samples.parquet")
    code, out, _ = history("add", str(campaign), "--db", str(db), "--date", "2024-03-02", capsys=capsys)
    assert code == 0 and "added entry 2" in out and "replaced 1 partial entry" in out
    with open_store(db, create=False) as store:
        assert [(e["id"], e["partial"]) for e in store.entries()] == [(2, False)]


@pytest.mark.infra
def test_a_finished_campaign_adds_itself(tiny_campaign: Campaign, capsys: pytest.CaptureFixture[str]) -> None:
    """The real tiny campaign (tests/campaign_fixtures.py): `mpiatlas campaign` added it at its end."""
    db = tiny_campaign.work / DEFAULT_DB
    assert f"history: added entry 1 to {db}" in tiny_campaign.result.stdout
    results = tiny_campaign.report.parent
    fits = json.loads((results / "fits" / "hockney.json").read_text())
    summary = pl.read_parquet(results / "tidy" / "imb_summary.parquet").filter(pl.col("t_median_usec") > 0)
    with open_store(db, create=False) as store:
        (entry,) = store.entries()
        rows = figures_frame(store.figures())
    assert entry["config_hash"] and entry["stack_versions"] and entry["trust"]["cells"]
    assert rows["system"].unique().to_list() == ["tiny"]  # the campaign's name
    # Every size of the summary and every resolved λ of the fits, with the same values.
    times = rows.filter(pl.col("parameter") == "t_median_usec")
    assert sorted(times["value"].to_list()) == sorted(summary["t_median_usec"].to_list())
    latencies = [f["latency_us"] for f in fits if "error" not in f and (f.get("latency_us") or 0) > 0]
    assert sorted(rows.filter(pl.col("parameter") == LATENCY)["value"].to_list()) == sorted(latencies)
    code, out, _ = history("add", str(results), "--db", str(db), capsys=capsys)
    assert code == 0 and "nothing added" in out
