"""The offline HTML report: tidy tables + fitted models -> one self-contained file.

Layout of the package (imports only go down this list; no module imports this one):

* :mod:`.formatting` — numbers, sizes, bindings as text;
* :mod:`.blocks` — the plain-data blocks (Heading, Notice, Table, ChartBlock, ...) a section is made of;
* :mod:`.data` — the tidy tables and fits read into one :class:`~.data.ReportData`;
* :mod:`.cells`, :mod:`.imb` — what the sections share about cells and the IMB summary;
* :mod:`.findings` — the sentences the report opens with (pure functions over polars frames);
* :mod:`.charts` — the altair chart builders the sections share;
* :mod:`.sections` — one module per section, and ``ORDER``, the order they appear in;
* :mod:`.trust` — the paragraph the Findings open with (perturbed, re-measured, noisy, widest intervals);
* :mod:`.kernel_blocks` — blocks the kernel sections share; :mod:`.physical_limits` — the nodes' copy rates;
* :mod:`.bundle` — the Vega scripts inlined, cached per version;
* :mod:`.render` — Jinja rendering (autoescaped ``mpiatlas/templates/report.html.j2``);
* :mod:`.build` — :func:`~.build.build_report`: the report of a campaign's tables and fits, written to a file.

Nothing is imported here, so a module that needs one piece (the formatting of numbers) does not load the
report's libraries (altair, jinja2).
"""
