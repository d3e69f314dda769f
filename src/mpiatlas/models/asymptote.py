"""Where a point-to-point bandwidth curve ends up: its in-cache peak and its large-message plateau.

Why: a shared-memory curve rises to a peak while the message (and the library's copy buffers)
fits in cache, then falls to a memory-bound plateau. A Hockney line fitted over the last segment
takes the sizes on the way down too, and its asymptotic B lands between the peak and the plateau
(12–15 % above the plateau on real curves). What a large message achieves is the plateau.

The rule (applied to the per-size median times, effective bandwidth b(s) = s / t(s) in MB/s):

* peak: the size with the highest effective bandwidth (the first one on ties);
* plateau: the largest ``MIN_PLATEAU_SIZES`` sizes always, extended towards smaller sizes while
  each size's bandwidth is within ``PLATEAU_TOL`` of the median of those largest sizes, and never
  down to the peak itself. ``PLATEAU_TOL`` is the noise band: repeated IMB runs of the same large
  size on a shared node spread by a few per cent; a size outside it is still on the way down;
* the plateau bandwidth is the median effective bandwidth of the plateau sizes;
* the curve *peaks in cache* when at least ``MIN_PLATEAU_SIZES`` sizes lie past the peak and the
  peak is more than ``PEAK_EXCESS`` above the plateau. Only then does the Hockney fit take the
  plateau as its asymptotic B: a monotone curve (inter-node links) or one whose top sizes stay
  within noise of its peak keeps its last segment's B;
* a plateau is a regime, so it needs ``MIN_PLATEAU_RUN`` (3) sizes, the fit's rule for any segment
  (:data:`mpiatlas.models.hockney.MIN_POINTS_PER_SEGMENT`). A curve that peaks in cache but whose
  top sizes do not agree over 3 sizes has no measured plateau (``has_plateau`` False): two slow
  sizes at the end (one perturbed repetition) once passed for a plateau at a tenth of the peak.
  The Hockney fit then reports the peak as B, marked as such.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MIN_PLATEAU_SIZES = 2  # the largest two sizes anchor the plateau
PLATEAU_TOL = 0.05  # a size within 5 % of the anchor's median bandwidth is on the plateau
PEAK_EXCESS = 0.10  # a peak less than 10 % above the plateau is noise or a shallow bump, not a cache peak
MIN_PLATEAU_RUN = 3  # a plateau B needs this many sizes (as every fitted segment does)


@dataclass(frozen=True)
class Asymptote:
    """Indices into the sorted sizes: the peak, and the first size of the plateau."""

    peak_index: int
    plateau_start: int
    plateau_MBps: float
    peaks_in_cache: bool
    n_sizes: int = 0  # sizes of the curve: the plateau runs from plateau_start to the end

    @property
    def plateau_n_sizes(self) -> int:
        return self.n_sizes - self.plateau_start

    @property
    def has_plateau(self) -> bool:
        """A curve that peaks in cache and whose plateau holds at least MIN_PLATEAU_RUN sizes."""
        return self.peaks_in_cache and self.plateau_n_sizes >= MIN_PLATEAU_RUN


def effective_bandwidth(sizes: npt.ArrayLike, times_us: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """s / t in MB/s (bytes per µs)."""
    return np.asarray(sizes, dtype=np.float64) / np.asarray(times_us, dtype=np.float64)


def plateau_start(bw: npt.NDArray[np.float64], peak_index: int) -> int:
    """First index of the plateau of ``bw`` (sorted by size): see the module docstring."""
    n = len(bw)
    first = max(n - MIN_PLATEAU_SIZES, 0)
    anchor = float(np.median(bw[first:]))
    start = first
    while start - 1 > peak_index and abs(bw[start - 1] / anchor - 1.0) <= PLATEAU_TOL:
        start -= 1
    return start


def find_asymptote(sizes: npt.ArrayLike, times_us: npt.ArrayLike) -> Asymptote:
    """Peak and plateau of a curve given as sorted sizes and their (median) times."""
    bw = effective_bandwidth(sizes, times_us)
    if bw.size == 0:
        raise ValueError("no sizes: an empty curve has no asymptote")
    peak = int(np.argmax(bw))
    start = plateau_start(bw, peak)
    plateau = float(np.median(bw[start:]))
    past_peak = len(bw) - 1 - peak
    peaks = past_peak >= MIN_PLATEAU_SIZES and start > peak and bw[peak] > (1.0 + PEAK_EXCESS) * plateau
    return Asymptote(peak_index=peak, plateau_start=start, plateau_MBps=plateau, peaks_in_cache=bool(peaks),
                     n_sizes=len(bw))
