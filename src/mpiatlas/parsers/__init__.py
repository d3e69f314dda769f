"""Parsers that turn raw benchmark output into tidy polars tables."""
