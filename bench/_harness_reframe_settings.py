"""ReFrame site configuration for bench/harness.py part 2: this machine, one partition, the
local scheduler and the `local` launcher (the test's executable is Intel MPI's own mpirun argv,
exactly as the mpiatlas cell launched it). Launches run one at a time, as mpiatlas's local
profile runs its cells (`cores: 1`), so neither harness lets launches share the 2 cores."""

site_configuration = {
    "systems": [
        {
            "name": "bench",
            "descr": "this machine (bench/harness.py)",
            "hostnames": [".*"],
            "modules_system": "nomod",
            "partitions": [
                {
                    "name": "local",
                    "descr": "local scheduler, local launcher",
                    "scheduler": "local",
                    "launcher": "local",
                    "environs": ["builtin"],
                    "max_jobs": 1,
                }
            ],
        }
    ],
    "environments": [{"name": "builtin", "cc": "cc", "cxx": "", "ftn": ""}],
    "logging": [
        {
            "level": "debug",
            "handlers": [{"type": "stream", "name": "stdout", "level": "info", "format": "%(message)s"}],
            "handlers_perflog": [
                {
                    "type": "filelog",
                    "prefix": "%(check_system)s/%(check_partition)s",
                    "level": "info",
                    "format": "%(check_job_completion_time)s|%(check_info)s|%(check_perfvalues)s",
                    "format_perfvars": "%(check_perf_var)s=%(check_perf_value)s %(check_perf_unit)s|",
                    "append": True,
                }
            ],
        }
    ],
}
