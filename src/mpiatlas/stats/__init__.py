"""Statistics of samples, in one place: medians and CIs, trust judgements, regions, ratios of two sides.

* :mod:`.aggregate` — per cell and size: median, min, 95 % CI of the median, CV; the only place they are computed;
* :mod:`.quality` — perturbed launches and noisy repetitions: can a number be trusted;
* :mod:`.regions` — point-to-point results by hardware region, intra/inter-node ratios;
* :mod:`.region_loggp` — LogGP's o and g per region from the loggp kernel's cells (the region table's o, g);
* :mod:`.ratios` — the ratio B/A of medians per size with its bootstrap CI and verdict (compare, tune, report);
* :mod:`.two_level` — the two-level bootstrap over runs, then repetitions, for several runs per side;
* :mod:`.agreement` — how K runs of one campaign agree on a figure: CV, max/min, interval coverage.
"""
