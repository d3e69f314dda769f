"""Performance models fitted to benchmark samples (parquet → fits); :func:`.fits.fit_all` fits every one of a campaign.

Nothing is imported here: a module that needs one model (the runner reads region tables) does not load
every model's fitting code and its libraries.

* :mod:`.fits` — ``fit_all``: every model of a campaign in one call, the ``Fits`` it returns, ``write_fits``;
* :mod:`.fit_records` — the typed records of the fits files' entries (``HockneyRecord``), JSON only at the file boundary;
* :mod:`.fits_files` — the fits files written, read and checked against ``data/schemas/fits-<model>.schema.json``;
* :mod:`.hockney` — piecewise λ + s/B, ``predict``, ``ci_warning``;
* :mod:`.hockney_trust` — how sure a Hockney fit is, in words: the λ floor, intervals too wide to quote;
* :mod:`.asymptote` — the bandwidth plateau (3 sizes at least) and the peak;
* :mod:`.alphabeta` — Alltoall/Allgather α-β fits against the speed of light;
* :mod:`.alphabeta_models` — the algorithm families and the model choice;
* :mod:`.alphabeta_records` — the typed records of ``alphabeta.json`` (``AlphaBetaFits``, ``AlphaBetaRecord``, the model comparison);
* :mod:`.collective_trees` — Open MPI coll_tuned trees;
* :mod:`.ompi_decision` — Open MPI's default Bcast algorithm (coll_tuned fixed decision), cited to its source;
* :mod:`.collective_regions` — collective times predicted from p2p region latencies;
* :mod:`.loggp` — the same schedules priced with LogGP (o, g, G, per-level term);
* :mod:`.loggp_fit` — LogGP calibrated on measured collectives, leave-one-algorithm-out;
* :mod:`.region_latency` — per-region p2p latencies (and optional o, g);
* :mod:`.prediction_errors` — predicted vs measured;
* :mod:`.perturbed_runs` — launches a calibration skips (latency-bound sizes spread over 2x);
* :mod:`.measured_vs_predicted` — a campaign's collectives against the region model and LogGP, leave-one-algorithm-out;
* :mod:`.ring_regions` — the ring with every hop priced by its region;
* :mod:`.kernels` — ring and matsum models;
* :mod:`.kernel_jacobi` — the jacobi model;
* :mod:`.jacobi_nodes` — hybrid vs pure MPI Jacobi over 1..N nodes at equal cores;
* :mod:`.kernel_grids` — process grids at equal P;
* :mod:`.kernel_common` — what the kernel models share;
* :mod:`.kernel_p2p` — pingpong and coll kernel fits;
* :mod:`.kernel_records` — the typed records of kernels.json (``KernelFits``: coll, pingpong, grid comparisons);
* :mod:`.ring_records` — the typed records of kernels.json's ring fits (``RingFit``);
* :mod:`.matsum_records` — the typed records of kernels.json's matsum fits (``MatsumFit``);
* :mod:`.jacobi_records` — the typed records of kernels.json's jacobi fits (``JacobiFit``);
* :mod:`.grid_records` — the typed records of process grids compared at equal P (``GridComparison``);
* :mod:`.json_fields` — the readers every fits record's ``from_json`` is built from (errors name file and key);
* :mod:`.best_algorithm` — the fastest algorithm per size.
"""
