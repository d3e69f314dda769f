"""``mpiatlas tune --validate``: write the validation campaign, run it by the workflow, judge it.

The campaign runs as any other: ``mpiatlas campaign --config DIR/validate.yaml`` (the checkout's
campaign lock, prerequisites, progress, its own report in results/<campaign>-validate). Inside the
workflow (rule ``tune_validate``) the enclosing ``mpiatlas campaign`` already holds that lock, so the
rule runs Snakemake directly on the generated config (``--nolock``: the outputs are another
campaign's, Snakemake's directory lock would only refuse the nested run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import yaml

from mpiatlas.campaign import snakemake_start
from mpiatlas.matrix import layout
from mpiatlas.tuning import validation
from mpiatlas.tuning.decide import Decision, TuneError
from mpiatlas.tuning.markdown import validation_markdown
from mpiatlas.tuning.validation_config import validation_config

CONFIG_NAME, JSON_NAME, MD_NAME = "validate.yaml", "validation.json", "validation.md"


class ValidationRecord(TypedDict):
    """``validation.json``: the validation campaign's results directory (None: nothing was tuned), the
    summary, what each stack said about its file, and every check."""

    campaign: str | None
    summary: validation.ValidationSummary
    evidence: dict[str, str]
    cells: list[validation.CellCheckRecord]
    untuned: NotRequired[list[validation.UntunedCheckRecord]]


def campaign_of(decision: Decision) -> dict[str, Any]:
    """The config the decision's campaign ran with (its ``campaign.json``)."""
    root = decision.source.parent if decision.source.name == "tidy" else decision.source
    path = root / "campaign.json"
    try:
        config: dict[str, Any] = json.loads(path.read_text())
        return config
    except (OSError, ValueError) as exc:
        raise TuneError(f"{path}: cannot read the campaign's config ({exc}); --validate needs a campaign's results "
                        "directory (results/<name>)") from exc


def run_campaign(config_path: Path, inside_workflow: bool) -> int:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    if inside_workflow:
        argv = snakemake_start.workflow_argv(config_path, "profiles/local", Path.cwd(), "--nolock",
                                             "--cores", str(os.cpu_count() or 1))
    else:
        # The entry point of this very environment (the one rules call too).
        argv = [str(Path(sys.executable).parent / "mpiatlas"), "campaign", "--config", str(config_path)]
    return subprocess.run(argv, env=env, check=False).returncode


def validate(decision: Decision, files: dict[tuple[str, str], list[str]], out: Path, *, repetitions: int = 5,
             results: Path | None = None, inside_workflow: bool = False, campaign: dict[str, Any] | None = None) -> int:
    """0 when every tuned cell and every sampled untuned size passes, 1 when one fails; TuneError on bad input. ``campaign``: the
    config the decision was made from (default: the decision's results/<name>/campaign.json)."""
    tuned = [s for s in decision.series if s.tuned]
    if not tuned:
        print("nothing to validate: every series keeps the default")
        record: ValidationRecord = {"campaign": None, "summary": validation.summary([]), "cells": [], "evidence": {}}
        (out / JSON_NAME).write_text(json.dumps(record, indent=1))
        (out / MD_NAME).write_text(validation_markdown([], {}, None))
        return 0
    if results is None:
        config = validation_config(campaign or campaign_of(decision), tuned, files, out, repetitions)
        config_path = (out / CONFIG_NAME).resolve()
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        results = Path(layout.results_dir(config["campaign"]["name"]))
        rc = run_campaign(config_path, inside_workflow)
        if rc != 0:
            print(f"mpiatlas tune: the validation campaign ({config_path}) ended with exit code {rc}; judging the "
                  "cells it measured", file=sys.stderr)
    checks = validation.check(results, tuned)
    untuned = validation.check_untuned(results, tuned)
    evidence = validation.evidence(results, tuned)
    summary = validation.summary(checks, untuned)
    record = {"campaign": str(results), "summary": summary, "evidence": evidence,
              "cells": [c.to_json() for c in checks], "untuned": [c.to_json() for c in untuned]}
    (out / JSON_NAME).write_text(json.dumps(record, indent=1, default=str))
    (out / MD_NAME).write_text(validation_markdown(checks, evidence, str(results), untuned))
    print(f"validation ({results}): {summary['passed']}/{summary['cells']} tuned cells pass; "
          f"{summary['untuned']['passed']}/{summary['untuned']['cells']} sampled untuned sizes not slower than the default")
    for line in summary["failed"] + summary["untuned"]["failed"]:
        print(f"  FAILED {line}")
    return 0 if summary["ok"] else 1
