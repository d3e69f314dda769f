"""The pace of SLURM status polls (mpiatlas.campaign.status_pacing) and the executor plugin that applies
it (snakemake_executor_plugin_mpiatlas_slurm, named by profiles/slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mpiatlas.campaign.status_pacing import CAP_S, StatusPacing, poll_times

REPO = Path(__file__).resolve().parents[1]


def upstream_poll_times(initial_s: float, job_end_s: float) -> list[float]:
    """snakemake-executor-plugin-slurm 2.8's schedule, as its check_active_jobs sets it: the wait grows by
    10 s after each poll that saw no job end, up to 180 s."""
    t, wait, times = initial_s, initial_s, [initial_s]
    while t < job_end_s:
        wait = min(wait + 10, 180)
        t += wait
        times.append(t)
    return times


@pytest.mark.parametrize("end_s", [0.5, 2, 5, 9, 13, 30, 60, 120, 600, 1800, 3600])
def test_a_job_is_seen_within_a_quarter_of_its_run_time(end_s: float) -> None:
    seen = poll_times(StatusPacing(initial_s=1), end_s)[-1]
    # The job is seen at most factor - 1 = 25 % of its run time, plus the 1 s initial wait, after it
    # ended, and never more than the 180 s cap.
    assert end_s <= seen <= end_s + min(0.25 * end_s + 1, CAP_S)


def test_short_jobs_are_seen_sooner_than_upstream_and_long_ones_polled_about_as_rarely() -> None:
    # The namespace cluster's jobs ran 0.7-9.2 s; upstream saw them 12 or 33 s after submission.
    assert upstream_poll_times(1, 5)[-1] == 12 and upstream_poll_times(1, 13)[-1] == 33
    assert poll_times(StatusPacing(initial_s=1), 5)[-1] == pytest.approx(5.77, abs=0.01)
    assert poll_times(StatusPacing(initial_s=1), 13)[-1] == pytest.approx(15.07, abs=0.01)
    # An hour-long job: 40 polls here against upstream's 30 (one squeue call each, for all jobs).
    assert (len(poll_times(StatusPacing(initial_s=1), 3600)), len(upstream_poll_times(1, 3600))) == (40, 30)


def test_a_job_that_ends_resets_the_wait_and_the_wait_stops_at_the_cap() -> None:
    pacing = StatusPacing(initial_s=2)
    waits = [pacing.after_poll(job_ended=False) for _ in range(40)]
    assert waits[:3] == [2.5, 3.125, 3.90625] and waits[-1] == CAP_S
    assert pacing.after_poll(job_ended=True) == 2
    assert pacing.after_poll(job_ended=False) == 2.5


@pytest.mark.parametrize("initial, factor, cap", [(0, 1.25, 180), (1, 1.0, 180), (200, 1.25, 180)])
def test_a_pace_that_would_not_grow_or_start_is_refused(initial: float, factor: float, cap: float) -> None:
    with pytest.raises(ValueError, match="status pacing needs"):
        StatusPacing(initial_s=initial, factor=factor, cap_s=cap)


def test_the_slurm_profile_runs_the_paced_plugin_with_upstreams_settings() -> None:
    import snakemake_executor_plugin_slurm as upstream  # the README's test command installs '.[slurm]'
    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "profile.yaml").read_text())
    plugin = ExecutorPluginRegistry().get_plugin(profile["executor"])
    assert plugin.name == "mpiatlas-slurm" and issubclass(plugin.executor, upstream.Executor)
    assert plugin.settings_cls is upstream.ExecutorSettings
    # Every setting the profile gives is one of the plugin's, under its prefix.
    fields = {f"mpiatlas-slurm-{name.replace('_', '-')}" for name in upstream.ExecutorSettings.__dataclass_fields__}
    given = {key for key in profile if key.startswith("mpiatlas-slurm-")}
    assert given and given <= fields
    assert not [key for key in profile if key.startswith("slurm-")]
