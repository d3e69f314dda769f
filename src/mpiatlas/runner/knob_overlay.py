"""A cell's knob set over its launch: the knob's value wins wherever else the variable is set.

Precedence, lowest first: the shell's environment < the stack's runtime environment < what the
launch sets (transport selection, binding, forced algorithm, the evidence knobs such as
I_MPI_DEBUG) < the program's extras (OMP_NUM_THREADS) and the TCP interface < **the knob set**.
A knob is a deliberate experiment, so it overrides even mpiatlas's own settings; the cell's judge
still checks what really happened (a knob that breaks the binding makes the cell invalid), and
provenance records what each knob replaced.

Stacks hand some variables to the ranks on the launcher's command line rather than in the
environment (Open MPI ``-x VAR=value`` and ``--mca name value``, MPICH hydra ``-genv VAR value``),
and a command-line setting beats the environment; so a knob that names such a variable replaces
its value there too. Everything stays an argument list and an environment mapping: no shell.
"""

from __future__ import annotations

from dataclasses import dataclass

from mpiatlas.stacks import Launch

MCA_ENV_PREFIX = "OMPI_MCA_"


@dataclass(frozen=True)
class Overlaid:
    """The launch with the knobs applied, and what each knob replaced (variable -> previous value)."""

    launch: Launch
    replaced: dict[str, str]


def overlay_launch(launch: Launch, program: list[str], knobs: dict[str, str]) -> Overlaid:
    """``launch`` with every launcher-side setting of a knob's variable set to the knob's value,
    and the knobs added to its environment. ``program`` (the end of the argv) is never touched."""
    if not knobs:
        return Overlaid(launch, {})
    ends_with_program = len(program) <= len(launch.argv) and launch.argv[len(launch.argv) - len(program):] == program
    cut = len(launch.argv) - len(program) if ends_with_program else len(launch.argv)
    launcher_argv, replaced = _overlay_argv(launch.argv[:cut], knobs)
    replaced |= {k: v for k, v in launch.env.items() if k in knobs and v != knobs[k]}
    return Overlaid(Launch(argv=launcher_argv + launch.argv[cut:], env=launch.env | knobs), replaced)


def _overlay_argv(argv: list[str], knobs: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    out = list(argv)
    replaced: dict[str, str] = {}
    i = 0
    while i < len(out):
        flag = out[i]
        if flag == "-x" and i + 1 < len(out) and "=" in out[i + 1]:  # Open MPI: -x VAR=value
            var, _, value = out[i + 1].partition("=")
            if var in knobs:
                replaced[var] = value
                out[i + 1] = f"{var}={knobs[var]}"
            i += 2
        elif flag == "-genv" and i + 2 < len(out):  # MPICH hydra: -genv VAR value
            var = out[i + 1]
            if var in knobs:
                replaced[var] = out[i + 2]
                out[i + 2] = knobs[var]
            i += 3
        elif flag in ("--mca", "-mca") and i + 2 < len(out):  # Open MPI: --mca name value
            var = MCA_ENV_PREFIX + out[i + 1]
            if var in knobs:
                replaced[var] = out[i + 2]
                out[i + 2] = knobs[var]
            i += 3
        else:
            i += 1
    return out, {k: v for k, v in replaced.items() if v != knobs[k]}


def shell_replaced(base_env: dict[str, str], knobs: dict[str, str], already: dict[str, str]) -> dict[str, str]:
    """Knob variables the shell (or the stack's runtime environment) had set to another value."""
    return {k: base_env[k] for k in knobs if k in base_env and base_env[k] != knobs[k] and k not in already}
