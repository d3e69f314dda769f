"""IMB table rows to numbers: vectorised over all rows of one column layout, exact fallback per row.

Rows are read as IMB prints them, each column right-aligned in 13 characters; rows that are not
(a wider number, other spacing) are split on runs of spaces instead. A row that neither way
yields one number per column (IMB's ``time-out.``/``out-of-mem.`` rows, a wrong column count,
a token polars does not read as the column's number, unusual whitespace) goes through
:func:`~mpiatlas.parsers.imb_shapes.parse_row`, the per-row logic of the line-by-line executor,
so it gets exactly that executor's values or error. Rows are identified by ``idx``, their line's
index in the batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from mpiatlas.parsers.imb_shapes import FIELD_TYPES, HEADER_TOKENS, ImbParseError, Layout, parse_row

# The values a row yields, as polars dtypes (imb_shapes names them).
FIELDS: dict[str, pl.DataType] = {name: getattr(pl, dtype)() for name, dtype in FIELD_TYPES.items()}

IMB_WIDTH = 13  # IMB's column width: IMB_output.c prints every column right-aligned in 13 characters


def _squeeze_spaces(text: pl.Expr) -> pl.Expr:
    """Runs of spaces to one space by literal replaces (much faster than a regex); a longer run
    than this folds leaves "" tokens, which fail the numeric check and take the exact fallback."""
    for run in ("        ", "    ", "  ", "  "):
        text = text.str.replace_all(run, " ", literal=True)
    return text


def _read_layout(rows: pl.DataFrame, layout: Layout) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rows of one layout -> (rows read as numbers, rows left to :func:`parse_row`).

    Two vectorised tries: IMB's own fixed-width columns, then whitespace-separated tokens.
    """
    fits = pl.col("text").str.len_bytes() == IMB_WIDTH * len(layout.columns)
    fixed_read, fixed_rest = _read_fixed_width(rows.filter(fits), layout)
    split_read, rest = _read_split(pl.concat([rows.filter(~fits), fixed_rest]), layout)
    return pl.concat([fixed_read, split_read], how="diagonal_relaxed"), rest


def _read_fixed_width(rows: pl.DataFrame, layout: Layout) -> tuple[pl.DataFrame, pl.DataFrame]:
    """IMB prints each column right-aligned in 13 characters: slice instead of splitting."""
    names = [f"_token{i}" for i in range(len(layout.columns))]
    sliced = rows.with_columns(
        pl.col("text").str.slice(IMB_WIDTH * i, IMB_WIDTH).str.strip_chars_start(" ").alias(name)
        for i, name in enumerate(names)
    )
    # A number filling all 13 characters touches the one before it, which line.split() would
    # merge with it: such rows take the split path. (A non-ASCII row fails the numbers anyway.)
    separated = pl.all_horizontal(pl.lit(True), *(pl.col(name).str.len_bytes() < IMB_WIDTH for name in names[1:]))
    return _read_tokens(sliced, layout, [pl.col(name) for name in names], separated, rows.columns)


def _read_split(rows: pl.DataFrame, layout: Layout) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Tokens as line.split() cuts them (runs of spaces; other whitespace fails and falls back)."""
    split = rows.with_columns(_squeeze_spaces(pl.col("text").str.strip_chars()).str.split(" ").alias("_tokens"))
    tokens = [pl.col("_tokens").list.get(i, null_on_oob=True) for i in range(len(layout.columns))]
    return _read_tokens(split, layout, tokens, pl.col("_tokens").list.len() == len(layout.columns), rows.columns)


def _read_tokens(
    rows: pl.DataFrame, layout: Layout, tokens: list[pl.Expr], well_formed: pl.Expr, columns: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Convert the tokens by the header: rows whose every token is its column's number, and the rest."""
    values: dict[str, pl.Expr] = {}
    read = well_formed
    for token, name in zip(tokens, layout.columns):
        field, kind = HEADER_TOKENS[name]
        value = token.cast(pl.Int64 if kind is int else pl.Float64, strict=False)
        if field is not None:
            # Out of the column type's range: null, so the row takes parse_row and its clear error.
            value = value.cast(FIELDS[field], strict=False)
            values[field] = value.alias(field)  # a repeated column: the last one
        read = read & value.is_not_null()
    out = rows.with_columns(*values.values(), read.alias("_read")).select(*columns, *values, "_read")
    return out.filter("_read").drop("_read", "text"), out.filter(~pl.col("_read")).select(columns)


def read_rows(
    rows: pl.DataFrame, layouts: list[Layout], sources: Sequence[str]
) -> tuple[pl.DataFrame, list[tuple[int, ImbParseError]]]:
    """Read the table rows (``idx``, ``file``, ``lineno``, ``layout`` index, ``text`` and any other
    columns, kept) -> (those columns + the values of :data:`FIELDS` + ``status``, ascending ``idx``;
    the (file, error) of each broken row)."""
    frames: list[pl.DataFrame] = []
    errors: list[tuple[int, ImbParseError]] = []
    for (layout_id,), part in rows.partition_by("layout", as_dict=True, include_key=False).items():
        layout = layouts[layout_id]
        if layout.unknown:
            continue  # the header itself is the (earlier) error
        read, rest = _read_layout(part, layout)
        frames.append(read.with_columns(pl.lit("ok").alias("status")))
        slow: list[dict[str, object]] = []
        for idx, file, lineno, text in rest.select("idx", "file", "lineno", "text").iter_rows():
            try:
                values, status = parse_row(sources[file], lineno, text.strip(), layout.columns)
            except ImbParseError as exc:
                errors.append((file, exc))
                continue
            slow.append({"idx": idx, **values, "status": status})
        if slow:
            schema = {"idx": pl.UInt32, **FIELDS, "status": pl.String}
            frames.append(rest.drop("text").join(pl.DataFrame(slow, schema=schema, orient="row"), on="idx"))
    if not frames:
        return pl.DataFrame(), errors
    return pl.concat(frames, how="diagonal_relaxed").sort("idx"), errors
