"""Two campaigns compared (``mpiatlas compare``): matched cells, fit differences, summary and diff report.

* :mod:`.campaigns` — loading the sides, matching cells on their axes, the whole comparison;
* :mod:`.kernels` — the kernel tables reduced to one time per launch and point, to be compared as IMB's;
* :mod:`.fits` — λ, B, α-β differences of two campaigns with CIs;
* :mod:`.summary` — the compact summary: what got faster or slower, where, by how much;
* :mod:`.report` — the HTML diff report, in the main report's look.
"""
