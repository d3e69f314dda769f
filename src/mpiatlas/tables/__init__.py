"""Raw output → tidy polars tables (raw → parquet), and foreign logs imported into the same shape.

* :mod:`.tidy` — raw cell directories → cells, provenance and every program's own tables;
* :mod:`.importer` — other people's IMB and OSU logs → a samples table;
* :mod:`.import_labels` — the label each imported file's rows get;
* :mod:`.samples` — the samples tables a fit reads, pooled.
"""
