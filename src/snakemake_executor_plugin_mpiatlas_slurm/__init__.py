"""Snakemake's SLURM executor (snakemake-executor-plugin-slurm, pinned in the ``slurm`` extra), polling
the scheduler at a pace that follows how long the jobs have run (:mod:`mpiatlas.campaign.status_pacing`).

Everything else is the upstream plugin's: its settings (under this plugin's prefix,
``--mpiatlas-slurm-…``), its sbatch lines, its status command, cancellation and logs. Upstream
lengthens its wait by 10 s after every poll that saw no job end, so a job of a few seconds is seen
12–33 s after it was submitted; here the wait grows by a factor, and a job is seen within a bounded
share of its own run time. ``profiles/slurm`` selects it with ``executor: mpiatlas-slurm``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from snakemake_executor_plugin_slurm import Executor as SlurmExecutor
from snakemake_executor_plugin_slurm import ExecutorSettings, common_settings

from mpiatlas.campaign.status_pacing import StatusPacing

__all__ = ["Executor", "ExecutorSettings", "common_settings"]


class Executor(SlurmExecutor):  # type: ignore[misc]  # upstream is untyped
    """The upstream SLURM executor; only the wait between status polls differs."""

    _pacing: StatusPacing | None = None

    def _status_pacing(self) -> StatusPacing:
        if self._pacing is None:
            initial = getattr(self.workflow.executor_settings, "init_seconds_before_status_checks", None)
            self._pacing = StatusPacing(initial_s=float(initial or 1))
        return self._pacing

    @property
    def next_seconds_between_status_checks(self) -> float:
        pacing = self._status_pacing()
        return pacing.wait_s if pacing.wait_s is not None else pacing.initial_s

    @next_seconds_between_status_checks.setter
    def next_seconds_between_status_checks(self, value: Any) -> None:
        """Upstream sets its own 10 s-step wait while it polls; the pace is decided below, once the
        poll has told which jobs ended."""

    async def check_active_jobs(self, active_jobs: list[Any]) -> AsyncGenerator[Any, None]:
        still_running = 0
        async for job in super().check_active_jobs(active_jobs):
            still_running += 1
            yield job
        self._status_pacing().after_poll(job_ended=not active_jobs or still_running < len(active_jobs))
