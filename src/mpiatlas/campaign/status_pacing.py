"""How often a SLURM campaign asks the scheduler whether its jobs have ended.

The SLURM executor plugin (snakemake-executor-plugin-slurm 2.8) waits its initial interval after a
poll that saw a job end, and 10 s *more* than the last wait after each poll that saw none: 1, 11,
21 … 180 s. A job of a few seconds is therefore seen 12 or 33 s after it was submitted, and the next
one is submitted only then. Measured on the namespace cluster: 14 batch jobs whose cells ran 0.7–9.2 s
each were seen 12–33 s after submission; the campaign took 373 s for 78 s of cells.

:class:`StatusPacing` lengthens the wait by a *factor* instead. The delay between a job's end and
the poll that sees it is then at most ``factor - 1`` of the time the job has run (25 % at 1.25) plus
the initial wait, a bounded share for short and long jobs alike, while a long job is polled about as rarely as before:
the wait reaches the 180 s cap after ~23 polls, and an hour-long job costs 40 polls against
upstream's 30. Every poll is one ``squeue``/``sacct`` call for all active jobs, so the scheduler's
load does not grow with the number of jobs. Pure arithmetic; the executor plugin
``snakemake_executor_plugin_mpiatlas_slurm`` applies it.
"""

from __future__ import annotations

from dataclasses import dataclass

# The plugin's own cap, kept: sacct without slurmdbd forgets a job MinJobAge (300 s) after it ends.
CAP_S = 180.0
FACTOR = 1.25


@dataclass
class StatusPacing:
    """The wait before the next status poll: ``initial_s`` after a poll that saw a job end (or had none
    to ask about), else the last wait times ``factor``, at most ``cap_s``."""

    initial_s: float
    factor: float = FACTOR
    cap_s: float = CAP_S
    wait_s: float | None = None

    def __post_init__(self) -> None:
        if not (self.initial_s > 0 and self.factor > 1 and self.cap_s >= self.initial_s):
            raise ValueError(f"status pacing needs initial_s > 0, factor > 1 and cap_s >= initial_s; "
                             f"got {self.initial_s}, {self.factor}, {self.cap_s}")

    def after_poll(self, *, job_ended: bool) -> float:
        """The wait before the next poll, after a poll that did (or did not) see a job end."""
        if job_ended or self.wait_s is None:
            self.wait_s = self.initial_s if job_ended else min(self.initial_s * self.factor, self.cap_s)
        else:
            self.wait_s = min(self.wait_s * self.factor, self.cap_s)
        return self.wait_s


def poll_times(pacing: StatusPacing, job_end_s: float) -> list[float]:
    """The times (from submission) at which a single job that ends at ``job_end_s`` is polled, the last
    being the poll that sees it end: the first poll comes ``initial_s`` after submission."""
    t, times = pacing.initial_s, [pacing.initial_s]
    while t < job_end_s:
        t += pacing.after_poll(job_ended=False)
        times.append(t)
    return times
