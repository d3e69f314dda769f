"""A node and its neighbours: hardware topology, pinning, physical limits, links, the nodes of a cell.

* :mod:`.topology` — hwloc XML → Topology, pin lists, hardware regions;
* :mod:`.topology_sysfs` — the same from Linux sysfs, without hwloc;
* :mod:`.topology_synthetic` — a machine described as ``pack:2 numa:4 … pu:1`` (for ``predict``);
* :mod:`.topology_record` — a topology as JSON, recorded with each cell and kept per host by tidy;
* :mod:`.multinode` — the allocation's nodes, placement over nodes, the node probe;
* :mod:`.ssh_hosts` — mpirun over ssh: hosts, hostfile, the probe through ssh, each rank's host;
* :mod:`.limits` — the node's copy rate per cache level and from memory (likwid-bench);
* :mod:`.copy_kernel` — the same from mpiatlas's own copy kernel (src/kernels/stream.c) without likwid-bench;
* :mod:`.c_tool` — a node tool in C (no MPI) built once into the user cache, per source, compiler and cpu;
* :mod:`.pair_latency` — the cache-line round trip between a launch's cpus before and after it, and each
  pair's best since boot (a VM's vCPUs moved apart: stats.quality judges the launch perturbed);
* :mod:`.copy_plan` — the working sets both measure on: half of each cache level, and memory;
* :mod:`.limits_record` — the typed records of limits.json (a node's copy rates, its levels, the cache key);
* :mod:`.link_rate` — the node's network links and the rate of the one a campaign uses.
"""
