"""The exit codes of every ``spx`` command, in one table (``docs/cli.md``, ``examples/gating/wait-for-verdict.sh``).

====  ==================  =====================================================================================
code  name                meaning
====  ==================  =====================================================================================
0     ``EXIT_OK``         the command did its job; for ``spx gate``: the experiment decided **Pass**
1     ``EXIT_FAIL``       ``spx gate``: decided **Fail**; ``spx run``: the benchmark failed (a rank crashed,
                          timed out, or the vLLM benches could not start); partial results are kept
2     ``EXIT_UNDECIDED``  ``spx gate``: **Inconclusive**, not decided (yet), or decided without a verdict
                          (InvalidSpec, BenchmarkFailed, InfraFailed)
3     ``EXIT_USAGE``      usage or input error: a bad option, an invalid or unreadable experiment file, no such
                          experiment or file, an output folder in use by another run, a run this machine cannot
                          hold (memory) or that is GPU-sized on a CPU without ``--device cpu``
4     ``EXIT_UNREACHABLE``  the cluster could not be reached or refused access (no kubeconfig, connection refused,
                          TLS, 401/403, API server errors)
78    ``EXIT_CONFIG``     ``spx operator``: refuses to start, the installed CRD is not the one it was built for
                          (``EX_CONFIG`` of BSD ``sysexits.h``; the message names the command that fixes it)
130   ``EXIT_INTERRUPTED``  interrupted (SIGINT, Ctrl-C); 128 + 2, the shell's convention
141   ``EXIT_PIPE``       stdout was closed by its reader (``spx crd | head -1``): the output stops quietly, as a
                          tool killed by SIGPIPE (128 + 13); ``spx run`` and ``spx serving`` instead finish the
                          run (its results are files) and exit with its code
====  ==================  =====================================================================================

Before this table, ``spx`` used 2 for usage errors as well; a pipeline that must tell "Inconclusive" from "you
mistyped the name" now can.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_UNDECIDED = 2
EXIT_USAGE = 3
EXIT_UNREACHABLE = 4
EXIT_CONFIG = 78
EXIT_INTERRUPTED = 130
EXIT_PIPE = 141

#: ``(code, name, meaning)`` rows, as documented (``spx --help`` and docs/cli.md print them).
TABLE: tuple[tuple[int, str, str], ...] = (
    (EXIT_OK, "ok", "done; spx gate: Pass"),
    (EXIT_FAIL, "fail", "spx gate: Fail; spx run, spx serving: the benchmark failed or could not start (partial "
     "results kept)"),
    (EXIT_UNDECIDED, "undecided", "spx gate: Inconclusive, not decided yet, or decided without a verdict"),
    (EXIT_USAGE, "usage", "bad option or input: invalid/unreadable file, no such experiment, --out in use, "
     "a run this machine cannot hold"),
    (EXIT_UNREACHABLE, "unreachable", "the cluster could not be reached or refused access"),
    (EXIT_CONFIG, "config", "spx operator: the installed CRD is not the one it was built for (the message names the fix)"),
    (EXIT_INTERRUPTED, "interrupted", "interrupted (Ctrl-C)"),
    (EXIT_PIPE, "pipe", "stdout closed by its reader (| head): output stopped quietly, as SIGPIPE would"),
)


#: The codes each ``spx`` command exits with: its ``--help`` and docs/cli.md list them from here.
COMMAND_CODES: dict[str, tuple[int, ...]] = {
    "run": (EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED),
    "validate": (EXIT_OK, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_PIPE),
    "report": (EXIT_OK, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_PIPE),
    "predict": (EXIT_OK, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_PIPE),
    "gate": (EXIT_OK, EXIT_FAIL, EXIT_UNDECIDED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED, EXIT_PIPE),
    "crd": (EXIT_OK, EXIT_USAGE, EXIT_PIPE),
    "serving": (EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED),
    "operator": (EXIT_OK, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_CONFIG, EXIT_INTERRUPTED),
    "completion": (EXIT_OK, EXIT_USAGE, EXIT_PIPE),
}


def epilog(command: str | None = None) -> str:
    """The exit-code table as plain text, for ``--help``; with ``command``, only the codes it exits with."""
    codes = COMMAND_CODES.get(command, ()) if command else ()
    rows = [row for row in TABLE if not codes or row[0] in codes]
    return "exit codes:\n" + "\n".join(f"  {code:>3}  {meaning}" for code, _, meaning in rows)
