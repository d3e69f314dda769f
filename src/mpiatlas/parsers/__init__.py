"""Raw benchmark output → rows: IMB, OSU, and the kernels' JSON lines.

* :mod:`.imb_shapes` — the one definition of IMB's table shapes;
* :mod:`.imb_scan` — its C executor (imbscan.c through ctypes, its tables generated from imb_shapes,
  compiled on first use);
* :mod:`.imb_lines` — its plain-Python executor (one cell's output);
* :mod:`.imb` — the IMB entry points;
* :mod:`.osu` — OSU 5.x–7.x text;
* :mod:`.osu_csv` — OSU CSV exports;
* :mod:`.osu_input` — which reader takes a file;
* :mod:`.kernels` — the kernels' JSON lines;
* :mod:`.loggp` — the loggp kernel's records as one row per trial (Kielmann's PRTT method).
"""
