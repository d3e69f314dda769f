"""What the machine did while a launch ran: evidence that a measurement was (not) disturbed.

Around each launch (runner.process.run_launch) the probe records:

* the node before and after: ``/proc/loadavg``, per-cpu times of ``/proc/stat`` (busy, steal),
  the node's cpu pressure (``/proc/pressure/cpu``, "some": time some task waited for a cpu) and,
  where the launch runs in a cgroup of its own (a SLURM job under cgroup v2), that cgroup's
  ``cpu.pressure``;
* per rank, while it runs: its run-queue wait (``/proc/<pid>/task/*/schedstat``, second field: ns
  spent runnable but not running, summed over its threads), its cpu time (utime + stime) and the
  cpus it may run on (its affinity, read again each time: stacks pin ranks inside MPI_Init);
* the whole launch tree's cpu time, read from the exited launcher (a zombie until reaped: its
  ``cutime``/``cstime`` hold every descendant it and they reaped).

Ranks are found by a sampler thread (:class:`RankSampler`, started before the launch and kept off
the ranks' planned cpus where the node has others): the launch's processes are the launcher, its
helpers (hydra proxies, orted/prted) and the ranks, found by walking the launcher's descendants
(each thread's ``/proc/<pid>/task/<tid>/children``; without those files, by scanning ``/proc`` for
the launch's session, session id = launcher pid, until the set stops changing). The ranks are the
leaves of that tree that carry the program's name (a launcher's short-lived helper is a leaf too, for
a while). The thread sleeps between samples (10 ms, then doubling to 250 ms: short launches are
seen, long ones cost ~4 samples a second). Values are cumulative, so the last values seen are kept;
what a rank did after the last sample (at most 250 ms) is not seen, which is why a rank's wait share
is of its *observed* lifetime (``wait_share``; ``wait_share_of_wall`` is of the launch's wall time).
Others' cpu time on the ranks' cpus is counted between the first and the last sample that saw the
ranks (``during_ranks``): the launcher's start-up leaves the cpus to anyone, harmlessly.

Nodes that share this machine (emulated hosts of one kernel, ``colocated`` in the cell's plan): the
launch's ranks on the other hosts are started by their sshd (mpirun over ssh), not by the launcher,
yet they run on the same cpus. Counted as others, they made every such launch look perturbed (an ssh
campaign of 4 ranks on two emulated hosts of a 2-core VM: others used 28-94 % of the ranks' cpus, all
20 cells re-measured three times). With ``machine_wide`` the sampler also takes, on each sample, the
processes of the whole machine named like the program that started after the launcher did, and
counts them with the ranks (their wait, cpu time and cpus): the launch's own ranks wherever a host
put them. A concurrent launch of the same program on the same machine would be counted too: on
emulated hosts the machine is the cluster, and one campaign at a time runs there. Under srun the
sampler stays off, as below: there its ranks, found so, waited 6-7 % of their launches (1 rank per
emulated host, TCP over veth; slurmstepd and the network's softirq work share the 2 cpus), which the
wait rule would call perturbed in every launch of a campaign whose nodes exist only to test function.

Under srun the ranks are children of slurmstepd, not ours: only node-level figures (the cell's
planned cpus) and a job cgroup's pressure are recorded, and ``ranks_observed`` says so. On several
nodes the ranks launched on other nodes are not ours either: this record is the launching node's,
and runner.remote_nodes adds every node's state before and after the launch (``nodes``; ``scope``
then says ``every node of the cell``, else ``local node``).

The probe's own cost (bench/machine_probe.py cost, 2026-11-27, this 2-core VM under load): per
launch ~0.6 ms more around run_launch (1.05 -> 1.66 ms for /bin/true, medians of 40, 95 % CIs
1.04-1.10 and 1.63-1.70 ms), nothing measurable inside ``wall_s`` (0.889 -> 0.903 ms, CIs
0.873-0.913 and 0.890-0.941 overlapping) and 0.30 ms of cpu [0.29, 0.32]; while a launch runs, ~0.6
ms of cpu per sample (7.6 ms for the 12 samples of a 3.4 s IMB PingPong launch), i.e. ~0.25 % of
one cpu at the 4 samples a second it settles at. A short launch pays more, since the first samples
come faster: 4.2-4.5 ms of cpu per ~345 ms PingPong launch (~1.3 % of one cpu) in the repeatability
bench of 2026-11-27. Each record carries its own cost (``probe``: the
sampler's cpu time, samples, tree walks, the cpus it ran on, the snapshots' cpu time).
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mpiatlas.runner.machine_record import LaunchMachine, ProbeCost, RankRecord, WindowRecord

PROC = Path("/proc")
CLK_TCK = os.sysconf("SC_CLK_TCK")
# /proc/stat per-cpu fields, in order (Linux >= 2.6.33); guest time is already counted in user.
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
IDLE_FIELDS = ("idle", "iowait")
# Processes of a launch's session that are never ranks even when they are leaves: the remote
# shells that start ranks on other nodes, and srun (whose ranks are slurmstepd's children).
NOT_RANKS = frozenset({"ssh", "rsh", "srun", "sshd"})
FIRST_INTERVAL_S = 0.01
MAX_INTERVAL_S = 0.25
STABLE_SCANS = 3  # samples with an unchanged session before /proc is no longer scanned
PER_CPU_DETAIL = 16  # cpus of a launch recorded one by one (beyond: their sums)


# -- parsing (pure: tests feed recorded /proc files) ------------------------------------------------


def parse_proc_stat(text: str) -> dict[int, dict[str, int]]:
    """Per-cpu jiffies from ``/proc/stat``: {cpu: {field: ticks}} (the aggregate ``cpu`` line skipped)."""
    cpus: dict[int, dict[str, int]] = {}
    for line in text.splitlines():
        match = re.match(r"cpu(\d+)\s+(.*)", line)
        if match:
            values = [int(v) for v in match.group(2).split()]
            cpus[int(match.group(1))] = dict(zip(CPU_FIELDS, values + [0] * (len(CPU_FIELDS) - len(values))))
    if not cpus:
        raise ValueError("/proc/stat: no per-cpu 'cpuN' line")
    return cpus


def parse_loadavg(text: str) -> list[float]:
    """The 1, 5 and 15 minute load averages of ``/proc/loadavg``."""
    fields = text.split()
    if len(fields) < 3:
        raise ValueError(f"/proc/loadavg: expected 3 load averages, got {text!r}")
    return [float(v) for v in fields[:3]]


def parse_schedstat(text: str) -> tuple[int, int]:
    """(ns on a cpu, ns waiting on a run queue) from ``/proc/<pid>/schedstat``."""
    fields = text.split()
    if len(fields) < 2:
        raise ValueError(f"schedstat: expected 'run_ns wait_ns slices', got {text!r}")
    return int(fields[0]), int(fields[1])


def parse_pressure(text: str) -> int | None:
    """Total µs of "some" stall from a PSI file (``cpu.pressure``, ``/proc/pressure/cpu``)."""
    match = re.search(r"^some\b.*\btotal=(\d+)", text, re.MULTILINE)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class PidStat:
    """The fields of ``/proc/<pid>/stat`` the probe uses (times in clock ticks)."""

    pid: int
    comm: str
    state: str
    ppid: int
    session: int
    utime: int
    stime: int
    cutime: int
    cstime: int
    starttime: int
    processor: int


def parse_pid_stat(text: str) -> PidStat:
    """``/proc/<pid>/stat``: comm may hold spaces and parentheses, so split after its last ')'."""
    head, _, tail = text.rpartition(")")
    pid, _, comm = head.partition(" (")
    f = tail.split()
    if len(f) < 37:
        raise ValueError(f"/proc/<pid>/stat: expected >= 39 fields, got {text[:80]!r}")
    # f[0] is field 3 (state): field n is f[n - 3].
    return PidStat(pid=int(pid), comm=comm, state=f[0], ppid=int(f[1]), session=int(f[3]), utime=int(f[11]),
                   stime=int(f[12]), cutime=int(f[13]), cstime=int(f[14]), starttime=int(f[19]),
                   processor=int(f[36]))


# -- node snapshots ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeSnapshot:
    cpus: dict[int, dict[str, int]]
    loadavg: list[float]
    pressure_us: int | None  # node PSI cpu "some" total
    cgroup_pressure_us: int | None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def own_cgroup(proc: Path = PROC) -> Path | None:
    """The cgroup v2 directory whose cpu.pressure covers the launch: the SLURM job's (``job_N``, which
    holds every step, srun's too) when we run inside one, else our own cgroup unless it is the root
    (then it is the whole machine, already in /proc/pressure/cpu). None without cgroup v2 pressure."""
    text = _read(proc / "self/cgroup") or ""
    match = re.search(r"^0::(/.*)$", text, re.MULTILINE)
    if not match or match.group(1) == "/":
        return None
    path = match.group(1)
    job = re.match(r"(.*/job_\d+)(/|$)", path)
    chosen = job.group(1) if job else path
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (root / chosen.lstrip("/") / "cpu.pressure").is_file():
            return root / chosen.lstrip("/")
    return None


def node_snapshot(cgroup: Path | None = None, proc: Path = PROC) -> NodeSnapshot:
    stat = _read(proc / "stat")
    load = _read(proc / "loadavg")
    if stat is None or load is None:
        raise OSError(f"{proc}/stat or {proc}/loadavg unreadable")
    psi = _read(proc / "pressure/cpu")
    cg = _read(cgroup / "cpu.pressure") if cgroup else None
    return NodeSnapshot(parse_proc_stat(stat), parse_loadavg(load), parse_pressure(psi) if psi else None,
                        parse_pressure(cg) if cg else None)


# -- the ranks, while the launch runs -------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """One end of the ranks' observed run: per-cpu times and each rank's cpu ticks then."""

    cpus: dict[int, dict[str, int]]
    rank_ticks: dict[int, int]


@dataclass
class Seen:
    """The last values seen of one process of the launch's session."""

    stat: PidStat
    wait_ns: int = 0
    run_ns: int = 0
    observed_s: float = 0.0  # its lifetime up to the last sample (seconds since it started)
    affinity: list[int] = field(default_factory=list)
    in_tree: bool = True  # a descendant of the launcher (else found machine-wide: a co-located host's rank)


def boot_seconds() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def read_process(pid: int, proc: Path = PROC) -> tuple[PidStat, int, int] | None:
    """A process's stat and its threads' summed (run, wait) ns; None once it is gone."""
    text = _read(proc / str(pid) / "stat")
    if text is None:
        return None
    stat = parse_pid_stat(text)
    run = wait = 0
    try:
        tasks = os.listdir(proc / str(pid) / "task")
    except OSError:
        return None
    for tid in tasks:
        sched = _read(proc / str(pid) / "task" / tid / "schedstat")
        if sched:
            r, w = parse_schedstat(sched)
            run, wait = run + r, wait + w
    return stat, run, wait


class RankSampler:
    """A low-rate thread that finds the session's processes and keeps their last values (see the module)."""

    def __init__(self, rank_names: frozenset[str] = frozenset(), avoid_cpus: list[int] | None = None,
                 machine_wide: bool = False) -> None:
        # Started before the launch, told the launcher's pid by watch(): starting a thread takes ~1 ms
        # (a handshake through the GIL), which would otherwise land inside the launch's wall_s.
        self.session = 0
        self.rank_names = frozenset(n[:15] for n in rank_names)  # comm: 15 characters at most
        self.seen: dict[int, Seen] = {}
        # /proc/stat and the ranks' cpu ticks when ranks were first and last seen: the cpus' use over
        # the ranks' own run (the launcher's start-up and wind-down leave the cpus to anyone).
        self.window: list[Window] = []
        self.samples = 0
        self.scans = 0  # process-tree walks (or /proc scans)
        self.cpu_s = 0.0
        self.avoid_cpus = set(avoid_cpus or ())
        self.machine_wide = machine_wide and bool(self.rank_names)
        self._outside: set[int] = set()  # pids found machine-wide (not the launcher's descendants)
        self._tree: set[int] = set()  # pids ever found in the launcher's tree (walk or session scan)
        self._session_start = 0  # the launcher's start (clock ticks since boot): older processes are not its ranks
        self.error: str | None = None
        self.cpus: list[int] = []  # where the thread ran: off the ranks' planned cpus when others are free
        self._watch = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="machine-probe", daemon=True)
        self._thread.start()

    def watch(self, session: int) -> None:
        """Start sampling the session (the launcher's pid) that has just been spawned."""
        self.session = session
        self._watch.set()

    def _run(self) -> None:
        try:
            self._sample_until_stopped()
        except (OSError, ValueError) as exc:  # an unexpected /proc: the launch goes on without evidence
            self.error = str(exc)

    def _sample_until_stopped(self) -> None:
        # Off the ranks' cpus where the node has others (Linux: pid 0 is this thread only).
        free = os.sched_getaffinity(0) - self.avoid_cpus
        if free and self.avoid_cpus:
            os.sched_setaffinity(0, free)
        self.cpus = sorted(os.sched_getaffinity(0))
        self._watch.wait()
        start = time.thread_time()
        if self._stop.is_set():
            return
        walk = (PROC / str(self.session) / "task" / str(self.session) / "children").exists()
        if self.machine_wide:
            launcher = read_process(self.session)
            self._session_start = launcher[0].starttime if launcher else 0
        interval, stable, known = FIRST_INTERVAL_S, 0, frozenset[int]()
        while not self._stop.wait(interval):
            if walk:
                pids = self._walk()
            else:
                pids = self._scan() if stable < STABLE_SCANS else list(self.seen)
            if self.machine_wide:
                pids = sorted(set(pids) | self._named_elsewhere())
            self._sample(pids)
            current = frozenset(self.seen)
            stable = stable + 1 if current == known and current else 0
            known = current
            interval = min(interval * 2, MAX_INTERVAL_S)
        self.cpu_s = time.thread_time() - start

    def _walk(self) -> list[int]:
        """The launcher and its descendants, from each thread's ``children`` file (a few reads)."""
        self.scans += 1
        found, todo = [], [self.session]
        while todo:
            pid = todo.pop()
            found.append(pid)
            try:
                tasks = os.listdir(PROC / str(pid) / "task")
            except OSError:
                continue
            for tid in tasks:
                todo += [int(c) for c in (_read(PROC / str(pid) / "task" / tid / "children") or "").split()]
        self._tree.update(found)
        return sorted(set(found) | set(self.seen))

    def _scan(self) -> list[int]:
        """Pids of the session from all of /proc (kernels without ``children`` files), only while
        the session's process set still changes: a scan reads every process's stat."""
        self.scans += 1
        found = []
        for name in os.listdir(PROC):
            if not name.isdigit():
                continue
            text = _read(PROC / name / "stat")
            if text is not None and parse_pid_stat(text).session == self.session:
                found.append(int(name))
        self._tree.update(found)
        return sorted(set(found) | set(self.seen))

    def _named_elsewhere(self) -> set[int]:
        """Processes of the whole machine named like the program, started after the launcher (a
        co-located host's ranks); those seen before are kept. One small read per process not yet
        known: ~1-2 ms for a few hundred processes, on emulated hosts only."""
        self._outside -= self._tree  # found in the launcher's tree after all (forked between walk and scan)
        for name in os.listdir(PROC):
            if not name.isdigit() or int(name) in self.seen or int(name) in self._tree:
                continue
            text = _read(PROC / name / "stat")
            if text is None:
                continue
            stat = parse_pid_stat(text)
            if stat.comm in self.rank_names and stat.starttime >= self._session_start:
                self._outside.add(stat.pid)
        return self._outside

    def _sample(self, pids: list[int]) -> None:
        self.samples += 1
        now = boot_seconds()
        for pid in pids:
            values = read_process(pid)
            if values is None or values[0].state in ("Z", "X"):
                continue  # gone (or exited, its times frozen): keep the last values seen
            stat, run, wait = values
            try:
                affinity = sorted(os.sched_getaffinity(pid))
            except OSError:
                affinity = self.seen[pid].affinity if pid in self.seen else []
            self.seen[pid] = Seen(stat, wait, run, now - stat.starttime / CLK_TCK, affinity,
                                  in_tree=pid not in self._outside)
        # The window opens when the program's own processes appear (not the launcher's passing helpers).
        ranks = self.ranks(named_only=bool(self.rank_names))
        if ranks:
            stat_text = _read(PROC / "stat")
            if stat_text:
                mark = Window(parse_proc_stat(stat_text), {r.stat.pid: r.stat.utime + r.stat.stime for r in ranks})
                self.window = [self.window[0] if self.window else mark, mark]

    def stop(self) -> None:
        self._stop.set()
        self._watch.set()
        self._thread.join()

    def ranks(self, named_only: bool = False) -> list[Seen]:
        """The leaves of the session's tree (see the module), launcher tools excluded; those named
        like the program when some are (a launcher's short-lived helper is a leaf too, for a while)."""
        parents = {s.stat.ppid for s in self.seen.values()}
        leaves = [s for pid, s in sorted(self.seen.items())
                  if pid != self.session and pid not in parents and s.stat.comm not in NOT_RANKS]
        named = [s for s in leaves if s.stat.comm in self.rank_names]
        return named if named or named_only else leaves


# -- the launch's record ----------------------------------------------------------------------------


def cpu_deltas(before: dict[int, dict[str, int]], after: dict[int, dict[str, int]],
               cpus: list[int]) -> dict[str, dict[str, float]]:
    """Per cpu: seconds in total, busy (not idle, not stolen) and stolen between two /proc/stat reads."""
    out = {}
    for cpu in cpus:
        if cpu not in before or cpu not in after:
            continue
        d = {k: after[cpu][k] - before[cpu][k] for k in CPU_FIELDS}
        total = sum(d.values())
        busy = total - sum(d[k] for k in IDLE_FIELDS) - d["steal"]
        out[str(cpu)] = {"total_s": total / CLK_TCK, "busy_s": busy / CLK_TCK, "steal_s": d["steal"] / CLK_TCK}
    return out


def detail(deltas: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per-cpu figures for provenance: each cpu's up to PER_CPU_DETAIL cpus (pinned ranks), their sums
    beyond (unpinned ranks on a large node: 10^5 cells x 128 cpus would bloat the provenance table)."""
    if len(deltas) <= PER_CPU_DETAIL:
        return deltas
    return {f"{len(deltas)} cpus": {k: round(sum(d[k] for d in deltas.values()), 2)
                                    for k in ("total_s", "busy_s", "steal_s")}}


def others(deltas: dict[str, dict[str, float]], own_s: float) -> tuple[float, float | None]:
    """Seconds the cpus were busy with anything but ``own_s``, and their share of the cpus' time."""
    total = sum(d["total_s"] for d in deltas.values())
    other = max(sum(d["busy_s"] for d in deltas.values()) - own_s, 0.0)
    return round(other, 3), (round(other / total, 4) if total > 0 else None)


def ticks(seconds: float | None) -> int | None:
    """Clock ticks of a /proc/stat figure: shares of few ticks are coarse (mpiatlas.stats.quality)."""
    return None if seconds is None else round(seconds * CLK_TCK)


def steal(deltas: dict[str, dict[str, float]]) -> tuple[float, int, int]:
    """The largest stolen share of one cpu, and its stolen and total ticks (0 without any)."""
    stolen = [(d["steal_s"] / d["total_s"], d["steal_s"], d["total_s"]) for d in deltas.values() if d["total_s"] > 0]
    share, steal_s, total_s = max(stolen, default=(0.0, 0.0, 0.0))
    return round(share, 4), ticks(steal_s) or 0, ticks(total_s) or 0


def window_record(window: list[Window], cpus: list[int]) -> WindowRecord | None:
    """The cpus' use between the first and the last sample that saw ranks, less the ranks' own."""
    if len(window) < 2 or window[0] is window[1]:
        return None
    first, last = window
    deltas = cpu_deltas(first.cpus, last.cpus, cpus)
    if not deltas or sum(d["total_s"] for d in deltas.values()) <= 0:
        return None
    ranks_s = sum(t - first.rank_ticks.get(pid, 0) for pid, t in last.rank_ticks.items()) / CLK_TCK
    other_s, share = others(deltas, ranks_s)
    span = max(d["total_s"] for d in deltas.values())
    return {"span_s": span, "cpu": detail(deltas), "ranks_cpu_s": round(ranks_s, 3), "other_cpu_s": other_s,
            "other_cpu_share": share}


def cpu_list(cpus: list[int]) -> list[int] | str:
    """A rank's cpus: the list, or beyond PER_CPU_DETAIL (unpinned) Linux's cpulist form ("0-127")."""
    if len(cpus) <= PER_CPU_DETAIL:
        return cpus
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)


def rank_record(rank: Seen) -> RankRecord:
    return {"pid": rank.stat.pid, "comm": rank.stat.comm, "cpus": cpu_list(rank.affinity),
            "last_cpu": rank.stat.processor,
            "observed_s": round(rank.observed_s, 4), "wait_s": round(rank.wait_ns / 1e9, 6),
            "run_s": round(rank.run_ns / 1e9, 6), "cpu_s": (rank.stat.utime + rank.stat.stime) / CLK_TCK,
            "wait_share": round(rank.wait_ns / 1e9 / rank.observed_s, 4) if rank.observed_s > 0 else None}


def launch_record(before: NodeSnapshot, after: NodeSnapshot, wall_s: float, ranks: list[Seen],
                  window: list[Window], tree: PidStat | None, planned_cpus: list[int] | None,
                  probe: ProbeCost, colocated: bool = False) -> LaunchMachine:
    """The ``machine`` block of provenance.json (its shares are read by mpiatlas.stats.quality): node
    snapshots ``before`` and ``after`` the launch, the ``ranks`` as last seen and the ``window`` of
    their run (RankSampler), the exited launcher's stat (``tree``), the cell's planned cpus; ``colocated``:
    the cell's hosts share this machine."""
    observed = [_with_share_of_wall(rank_record(r), r, wall_s) for r in ranks]
    rank_cpus = sorted({c for r in ranks for c in r.affinity})
    cpus = rank_cpus or sorted(planned_cpus or []) or sorted(after.cpus)
    deltas = cpu_deltas(before.cpus, after.cpus, cpus)
    # Over the whole launch the launch's own cpu time is the whole tree's (the exited launcher's own
    # and its reaped descendants'), else the ranks' last seen; what remains was someone else's.
    # Without either (srun: the ranks are slurmstepd's), the ranks' cpu time cannot be told from others'.
    tree_cpu = (tree.utime + tree.stime + tree.cutime + tree.cstime) / CLK_TCK if tree else None
    # A co-located host's ranks (found machine-wide) are the launch's own too, outside its tree.
    outside = [r for r in ranks if not r.in_tree]
    outside_cpu = sum((r.stat.utime + r.stat.stime) / CLK_TCK for r in outside)
    own = tree_cpu + outside_cpu if tree_cpu is not None else \
        sum(r["cpu_s"] for r in observed) if observed else None
    if colocated and not observed:  # the other hosts' ranks ran on these cpus, unseen: not others
        own = None
    other_s, other_share = others(deltas, own) if own is not None else (None, None)
    during = window_record(window, cpus)
    steal_share, steal_ticks, steal_of = steal(deltas)
    judged_on_other_s, judged_on_cpu = (during["other_cpu_s"], during["cpu"]) if during else (other_s, deltas)
    record: LaunchMachine = {
        "scope": "local node",
        # The launch's wall time: what mpiatlas.stats.quality sets the ranks' run-queue wait against.
        "wall_s": round(wall_s, 4),
        "ranks_observed": bool(observed),
        "cpus": cpus,
        "cpus_from": "rank affinity" if rank_cpus else ("planned pins" if planned_cpus else "all cpus (unpinned)"),
        "loadavg_before": before.loadavg, "loadavg_after": after.loadavg,
        "cpu": detail(deltas),
        "launch_cpu_s": round(own, 3) if own is not None else None,
        "other_cpu_s": other_s,
        # Others' share of the ranks' cpus while the ranks ran (the launcher's start-up leaves them
        # idle for anyone: over the whole launch that share says little); over the launch without ranks.
        "other_cpu_share": during["other_cpu_share"] if during else other_share,
        # ... and the ticks it was counted from (others', all of the cpus'): its counting resolution.
        "other_cpu_ticks": ticks(judged_on_other_s),
        "cpu_ticks": ticks(sum(d["total_s"] for d in judged_on_cpu.values())),
        "other_cpu_share_launch": other_share,
        "during_ranks": during,
        # The most stolen of the ranks' cpus over the launch, and its stolen and total ticks.
        "steal_share": steal_share, "steal_ticks": steal_ticks, "steal_of_ticks": steal_of,
        "node_cpu_pressure_share": _share(before.pressure_us, after.pressure_us, wall_s),
        "cgroup_cpu_pressure_share": _share(before.cgroup_pressure_us, after.cgroup_pressure_us, wall_s),
        # Many ranks (a large node): the PER_CPU_DETAIL that waited most are kept, n_ranks counts all.
        "n_ranks": len(observed),
        # Of them, found machine-wide: a co-located host's ranks, started by its sshd.
        "ranks_outside_tree": len(outside),
        "ranks": sorted(observed, key=lambda r: -(r["wait_share"] or 0))[:PER_CPU_DETAIL]
        if len(observed) > PER_CPU_DETAIL else observed,
        "wait_share": max((r["wait_share"] for r in observed if r["wait_share"] is not None), default=None),
        "probe": probe,
    }
    if not observed:
        record["missing"] = ("per-rank run-queue wait: the ranks were not found among the launch's processes "
                             "(srun starts them under slurmstepd, or the launch ended before the first sample)"
                             + ("" if own is not None else "; others' cpu time on the ranks' cpus: the ranks' own "
                                "cpu time is not ours to read"))
    return record


def _with_share_of_wall(record: RankRecord, rank: Seen, wall_s: float) -> RankRecord:
    record["wait_share_of_wall"] = round(rank.wait_ns / 1e9 / wall_s, 4) if wall_s > 0 else None
    return record


def _share(before_us: int | None, after_us: int | None, wall_s: float) -> float | None:
    if before_us is None or after_us is None or wall_s <= 0:
        return None
    return round((after_us - before_us) / 1e6 / wall_s, 4)
