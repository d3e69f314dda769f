"""adaptive_round: decide, from the sealed cells, which series need more repetitions and which launches
still perturbed get the later re-measure round (Snakemake ``script:``).

The decision of round r (mpiatlas.campaign.adaptive_rounds.decide_round) reads round r - 1's decision, the
campaign's validated config and the raw cells; a script, not a ``run:`` block, so that no second
Snakemake process parses the workflow again.
"""

from pathlib import Path

from mpiatlas.campaign import adaptive_rounds
from mpiatlas.campaign.round_decision import read_decision
from mpiatlas.matrix.config import load

sm = snakemake  # noqa: F821 -- injected by Snakemake's script directive

round_ = int(sm.wildcards.round)
config = load(sm.input.campaign)
# Round r > 0: the decision of round r - 1 (the series it left at `more`, and their counts).
previous = None
if round_ > 0:
    named = sm.input.previous  # one file: a string or a one-item list, depending on Snakemake's version
    previous = read_decision(Path(named if isinstance(named, str) else named[0]))
decision = adaptive_rounds.decide_round(config, Path(sm.params.raw), round_, previous)
adaptive_rounds.write_decision(decision, sm.output.decision, sm.output.manifest)
with open(sm.log[0], "w") as log:
    states: dict[str, int] = {}
    for entry in decision["series"]:
        states[entry["state"]] = states.get(entry["state"], 0) + 1
    cells = sum(len(members) for members in decision["groups"].values())
    print(f"round {round_}: series by state {states}; next round: {cells} cells in {len(decision['groups'])} groups",
          file=log)
    again = decision.get("later_remeasure") or []
    if again:
        n = sum(len(decision["groups"][g]) for g in again)
        print(f"  of which {n} cells still perturbed, re-measured after a wait for a quiet machine: "
              f"{len(again)} groups", file=log)
    for entry in decision["series"]:
        if entry["round"] == round_ and decision["spec"] is not None:
            print(f"  {entry['series']}: {entry['reps']} reps, worst half-width {entry['halfwidth']}, "
                  f"{entry['state']}", file=log)
