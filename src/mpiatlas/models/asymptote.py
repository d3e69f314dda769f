"""The two bandwidth figures of a point-to-point curve, each with one fixed definition, and the
plateau the model's last segment may sit on.

The figures (effective bandwidth b(s) = s / t(s) in MB/s of the per-size median times t(s)):

* **peak bandwidth** (``peak_bandwidth_MBps``): the highest b(s) over the measured sizes, and the size
  where it is (the first one on ties). On shared memory it is an in-cache figure; on a link that
  rises monotonically it is the largest size's;
* **asymptotic bandwidth** (``asymptotic_bandwidth_MBps``): b(s) at the largest measured size, at
  ``asymptotic_bytes``: what the largest message achieves, the figure IMB and OSU users quote ("the
  4 MiB bandwidth"). On a curve that falls from an in-cache peak to a memory-bound plateau it is the
  plateau; on a curve that still rises it trails the Hockney B by the factor 1/(1 + λ·B/s) (under
  1 % for 4 MiB over InfiniBand or shared memory; 4 % for a rendezvous handshake of 36 µs). It is the
  per-size median over repetitions, and its interval is over launches (mpiatlas.models.hockney), so
  one slow launch does not move it. The published "max bandwidth" of the shared datasets' InfiniBand
  and RoCE runs is this figure at 4 MiB wherever the curve rises monotonically.

Why fixed: the asymptote used to be the plateau when at least 3 sizes past the peak agreed within
5 % and the peak otherwise, so run-to-run noise at 2–4 MiB flipped *which quantity* the headline
was (11,422 MB/s, a peak, in one run of the same campaign; 8,577 MB/s, a plateau, in the next).
Both figures are now reported on every curve, and a comparison names which one it uses.

The plateau (:func:`find_asymptote`) still shapes the *model*: a curve that peaks in cache gets its
last Hockney segment from the plateau sizes (:mod:`mpiatlas.models.hockney`). That is a choice of
model, never a change of what a headline figure means:

* plateau: the largest ``MIN_PLATEAU_SIZES`` sizes always, extended towards smaller sizes while
  each size's bandwidth is within ``PLATEAU_TOL`` of the median of those largest sizes, and never
  down to the peak itself;
* the curve *peaks in cache* when at least ``MIN_PLATEAU_SIZES`` sizes lie past the peak and the
  peak is more than ``PEAK_EXCESS`` above the plateau, and it *has a plateau* when that run holds
  ``MIN_PLATEAU_RUN`` (3) sizes, the fit's rule for any segment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MIN_PLATEAU_SIZES = 2  # the largest two sizes anchor the plateau
PLATEAU_TOL = 0.05  # a size within 5 % of the anchor's median bandwidth is on the plateau
PEAK_EXCESS = 0.10  # a peak less than 10 % above the plateau is noise or a shallow bump, not a cache peak
MIN_PLATEAU_RUN = 3  # a plateau B needs this many sizes (as every fitted segment does)
# The asymptotic bandwidth is read at the largest size alone: a median over several top sizes would
# take sizes that still rise (monotone links: −1.5 % on InfiniBand, −7 % with a slow rendezvous) or
# still fall from the peak; robustness comes from the median over launches instead.
ASYMPTOTE_SIZES = 1


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


@dataclass(frozen=True)
class BandwidthFigures:
    """The two fixed bandwidth estimands of one curve (see the module docstring)."""

    peak_index: int
    peak_MBps: float
    asymptotic_index: int  # the largest size
    asymptotic_MBps: float


def peak_index(bw: npt.NDArray[np.float64]) -> int:
    """Index of the highest effective bandwidth (the first one on ties)."""
    return int(np.argmax(bw))


def asymptotic_window(n_sizes: int) -> slice:
    """The sizes the asymptotic bandwidth is read at (their median): the ASYMPTOTE_SIZES largest."""
    return slice(max(n_sizes - ASYMPTOTE_SIZES, 0), n_sizes)


def bandwidth_figures(sizes: npt.ArrayLike, times_us: npt.ArrayLike) -> BandwidthFigures:
    """Peak and asymptotic bandwidth of a curve given as sorted sizes and their (median) times."""
    bw = effective_bandwidth(sizes, times_us)
    if bw.size == 0:
        raise ValueError("no sizes: an empty curve has no bandwidth")
    peak = peak_index(bw)
    window = asymptotic_window(len(bw))
    return BandwidthFigures(peak_index=peak, peak_MBps=float(bw[peak]), asymptotic_index=window.stop - 1,
                            asymptotic_MBps=float(np.median(bw[window])))
