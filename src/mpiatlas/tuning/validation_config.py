"""The validation campaign of a tuning: exactly the tuned cells, three ways, as an ordinary config.

A tuned cell is a stack x transport x collective x P whose decision chose a non-default algorithm
for some sizes. The validation config runs it, by the same workflow as any campaign
(``mpiatlas campaign --config <this>``), with two axes the cell model already has:

* the algorithm axis: ``default`` and every forced winner (``stacks.<label>.algorithms``);
* the knob-set axis: ``none`` (the stack's default) and ``tuned-<stack>-<transport>``, the exported file
  applied the way a user applies it, as environment (:func:`file_env`): Open MPI reads
  ``OMPI_MCA_<param>`` like ``--mca <param>``, Intel MPI the ``I_MPI_ADJUST_*`` values of the env
  file, MPICH the JSON path and the variables of its env file.

The cells of the default algorithm with no knob set are "default", with ``tuned-<stack>-<transport>`` are
"exported", the forced winner with no knob set is "forced"; the forced winner with the knob set is
a cross-product cell nobody reads (the forced algorithm wins over the file in all three stacks).
Sizes: IMB and the coll kernel measure every power of two between the bounds, so the range covers
the tuned sizes and a sample of the untuned ones (:func:`untuned_points`: the file must leave those to
the library, default vs exported file), and the analysis reads only those.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mpiatlas.matrix import knobs
from mpiatlas.matrix.cells import imb_provider_among
from mpiatlas.spine.campaign import Campaign
from mpiatlas.models.best_algorithm import DEFAULT
from mpiatlas.tuning import intelmpi_env, mpich_json, openmpi_rules, samples
from mpiatlas.tuning.decide import SeriesDecision, TuneError, size_ranges

MIN_REPETITIONS = 5
SUFFIX = "-validate"


def knob_set(stack: str, transport: str) -> str:
    """The knob set of one stack x transport's file (sets are global: two stacks share a transport name)."""
    return f"tuned-{stack}-{transport}"


def tuned_points(series: SeriesDecision) -> list[tuple[int, int, str]]:
    """(P, bytes, winner) of every measured point the decision gave a non-default algorithm."""
    return sorted((p.np, p.bytes, p.algorithm) for p in series.points if p.algorithm != DEFAULT)


def untuned_points(series: SeriesDecision) -> list[tuple[int, int]]:
    """(P, bytes) samples of the sizes the file leaves to the library, at the tuned process counts.

    Per process count with a tuned range, every run of adjacent measured sizes that kept the default
    (an untuned range: below, between or above the tuned ones) contributes its first and last
    measured size, the ones nearest a tuned boundary and the extremes: one or two sizes per range.
    Zero bytes is left out (IMB and the coll kernel measure powers of two from the bounds)."""
    tuned_nps = {p for p, _, _ in tuned_points(series)}
    out: set[tuple[int, int]] = set()
    for np_ in tuned_nps:
        for r in size_ranges([p for p in series.points if p.np == np_]):
            sizes = [p.bytes for p in r.points if p.bytes > 0]
            if r.algorithm == DEFAULT and sizes:
                out |= {(np_, sizes[0]), (np_, sizes[-1])}
    return sorted(out)


def file_env(series: list[SeriesDecision], out: Path, files: list[str]) -> dict[str, str]:
    """The environment that loads one stack x transport's exported file(s) from ``out``."""
    kind = series[0].kind
    if kind == "openmpi":
        args = openmpi_rules.mca_args(str((out / files[0]).resolve()))
        env = {knobs.KIND_PREFIXES["openmpi"][0] + args[i + 1]: args[i + 2] for i in range(0, len(args), 3)}
    elif kind == "intelmpi":
        env = intelmpi_env.env_vars(series)
    elif kind == "mpich":
        env = mpich_json.env_vars(str((out / files[0]).resolve()), str((out / files[1]).resolve()))
    else:
        raise TuneError(f"{series[0].stack}: stack kind {kind!r} has no tuning format")
    for name, value in env.items():
        problem = knobs.value_problem(value)
        if problem:
            # Knob values never reach a shell, yet the knob axis refuses shell characters (';' separates
            # Intel MPI presets): such a file is validated by hand, not by a knob set.
            raise TuneError(f"{series[0].stack}/{series[0].transport}: {name}: {problem}: cannot be a knob set of "
                            "the validation campaign")
    return env


# Sizes below the smallest tuned one that IMB runs first and the analysis ignores: a lone size is
# IMB's first, timed on cold caches and pages (measured here: Intel MPI's Allreduce at 16 KiB took
# ~11 us alone against ~6 us after smaller sizes), which is not what the campaign decided on.
WARMUP_SIZES = 2


def _msglog(sizes: list[int]) -> list[int]:
    nonzero = [b for b in sizes if b > 0] or [1]
    return [max(0, int(math.log2(min(nonzero))) - WARMUP_SIZES), math.ceil(math.log2(max(nonzero)))]


def validation_config(campaign: Mapping[str, Any], series: list[SeriesDecision], files: dict[tuple[str, str], list[str]],
                      out: Path, repetitions: int = MIN_REPETITIONS) -> dict[str, Any]:
    """The config of the validation campaign of ``series`` (those with a tuned range) from the
    original campaign's config (its ``campaign.json``) and the files written to ``out``."""
    if repetitions < MIN_REPETITIONS:
        raise TuneError(f"repetitions: at least {MIN_REPETITIONS} (the ratio CIs need them), got {repetitions}")
    tuned = [s for s in series if s.tuned]
    if not tuned:
        raise TuneError("nothing to validate: no series has a non-default algorithm")
    # The new config is built from (copies of) the campaign's document, as campaign.json has it.
    campaign = campaign.as_dict() if isinstance(campaign, Campaign) else campaign
    orig = campaign["campaign"]
    stacks: dict[str, Any] = {}
    knob_sets: dict[str, dict[str, str]] = {}
    imb_benches: set[str] = set()
    kernel_colls: set[str] = set()
    kernel_stacks: dict[str, list[str]] = {}
    imb_stacks: set[str] = set()
    nps: set[int] = set()
    sizes: list[int] = []
    for s in tuned:
        if s.stack not in campaign["stacks"]:
            raise TuneError(f"campaign.json: no stack {s.stack!r} (the decision's stack): expected the config of "
                            "the campaign the decision was made from")
        entry = stacks.setdefault(s.stack, {**copy.deepcopy(campaign["stacks"][s.stack]), "transports": [],
                                            "algorithms": {}, "knobs": [knobs.NONE]})
        if s.transport not in entry["transports"]:
            entry["transports"].append(s.transport)
            entry["knobs"].append(knob_set(s.stack, s.transport))
        points = tuned_points(s)
        winners = list(dict.fromkeys(a for _, _, a in points))
        algos = entry["algorithms"].setdefault(s.benchmark, [DEFAULT])
        algos += [a for a in winners if a not in algos]
        nps |= {p for p, _, _ in points}
        sizes += [b for _, b, _ in points] + [b for _, b in untuned_points(s)]
        if s.source == samples.KERNEL:
            kernel_colls.add(s.benchmark)
            kernel_stacks.setdefault(s.stack, [])
            if s.transport not in kernel_stacks[s.stack]:
                kernel_stacks[s.stack].append(s.transport)
        else:
            imb_benches.add(s.benchmark)
            imb_stacks.add(s.stack)
    for label in sorted(imb_stacks):
        # MPICH runs Intel MPI's IMB binaries (cells.imb_provider): the provider comes along, with no
        # cells of its own (imb.stacks below names only the tuned stacks).
        provider = imb_provider_among({name: s["kind"] for name, s in campaign["stacks"].items()}, label)
        if provider and provider not in stacks:
            entry = copy.deepcopy(campaign["stacks"][provider])
            stacks[provider] = {**entry, "transports": entry["transports"][:1], "algorithms": {}, "knobs": [knobs.NONE]}
    for (stack, transport), names in files.items():
        group = [s for s in tuned if (s.stack, s.transport) == (stack, transport)]
        if group:
            knob_sets[knob_set(stack, transport)] = file_env(group, out, names)
    msglog = _msglog(sizes)
    imb = {**copy.deepcopy(campaign["imb"]), "benchmarks": sorted(imb_benches) or ["Barrier"], "msglog": msglog}
    imb.pop("options", None)
    # imb.stacks may not be empty: with no IMB series, the first stack's Barrier cells (none for a
    # stack without IMB, such as Open MPI here) stand in.
    imb["stacks"] = sorted(imb_stacks) or [tuned[0].stack]
    config: dict[str, Any] = {
        "campaign": {"name": f"{orig['name']}{SUFFIX}", "repetitions": repetitions,
                     **{k: orig[k] for k in ("timeout_s", "stacks_dir", "allow_oversubscribe", "launcher") if k in orig},
                     "limits": "off"},
        "stacks": stacks,
        "mappings": sorted(set(campaign["mappings"])),
        "processes": sorted(nps),
        "imb": imb,
        "knobs": knob_sets,
        **{k: copy.deepcopy(campaign[k]) for k in ("grouping", "network") if k in campaign},
    }
    if kernel_stacks:
        coll = copy.deepcopy(((campaign.get("kernels") or {}).get("coll")) or {})
        coll.update({"collectives": sorted(kernel_colls), "msglog": msglog, "processes": sorted(nps),
                     "forced_algorithms": sorted(kernel_stacks)})
        config["kernels"] = {"stacks": kernel_stacks, "coll": coll}
    return config
