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
70    ``EXIT_INTERNAL``   an internal error (a bug in spx: an exception no command expected); never a verdict, so
                          a pipeline never reads a crash as ``spx gate``'s Fail (``EX_SOFTWARE`` of ``sysexits.h``)
78    ``EXIT_CONFIG``     ``spx operator``: refuses to start, the installed CRD is not the one it was built for
                          (``EX_CONFIG`` of BSD ``sysexits.h``; the message names the command that fixes it)
130   ``EXIT_INTERRUPTED``  interrupted (SIGINT, Ctrl-C); 128 + 2, the shell's convention
141   ``EXIT_PIPE``       stdout (or stderr) was closed by its reader before spx finished (``spx crd | true``): the output stops
                          quietly, as a tool killed by SIGPIPE (128 + 13); ``spx run`` and ``spx serving`` instead
                          finish the run (its results are files) and exit with its code
====  ==================  =====================================================================================

Before this table, ``spx`` used 2 for usage errors as well; a pipeline that must tell "Inconclusive" from "you
mistyped the name" now can.
"""

from __future__ import annotations

from spx.vocabulary import CommandName

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_UNDECIDED = 2
EXIT_USAGE = 3
EXIT_UNREACHABLE = 4
EXIT_INTERNAL = 70
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
    (EXIT_INTERNAL, "internal", "an internal error (a bug in spx; the message says where); never a verdict"),
    (EXIT_CONFIG, "config", "spx operator: the installed CRD is not the one it was built for (the message names the fix)"),
    (EXIT_INTERRUPTED, "interrupted", "interrupted (Ctrl-C)"),
    (EXIT_PIPE, "pipe", "stdout closed by its reader before spx finished writing: output stopped quietly, as SIGPIPE would"),
)


#: The codes each ``spx`` command exits with: its ``--help`` and docs/cli.md list them from here.
COMMAND_CODES: dict[CommandName, tuple[int, ...]] = {
    "run": (EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED),
    "validate": (EXIT_OK, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_PIPE),
    "report": (EXIT_OK, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_PIPE),
    "predict": (EXIT_OK, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_PIPE),
    "gate": (EXIT_OK, EXIT_FAIL, EXIT_UNDECIDED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_PIPE),
    "crd": (EXIT_OK, EXIT_USAGE, EXIT_INTERNAL, EXIT_PIPE),
    "serving": (EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED),
    "operator": (EXIT_OK, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERNAL, EXIT_CONFIG, EXIT_INTERRUPTED),
    "completion": (EXIT_OK, EXIT_USAGE, EXIT_INTERNAL, EXIT_PIPE),
}


#: What a code means for one command, in its own words (its ``--help``); a code not listed here means
#: what :data:`TABLE` says (interrupted, stdout closed, cluster unreachable read the same everywhere).
COMMAND_MEANINGS: dict[CommandName, dict[int, str]] = {
    "run": {
        EXIT_OK: "the benchmark completed (the verdict is in the report)",
        EXIT_FAIL: "the benchmark failed or the vLLM benches could not start (partial results and logs kept)",
        EXIT_USAGE: "bad option or input: invalid/unreadable file, --out in use or holding a run, a run this "
        "machine cannot hold, fewer ranks than TP for an explicit gather",
    },
    "validate": {
        EXIT_OK: "the file is a valid experiment (printed normalised)",
        EXIT_USAGE: "the file is invalid or unreadable (every problem is listed)",
    },
    "report": {
        EXIT_OK: "the report was printed and the plot drawn",
        EXIT_USAGE: "bad option or input: no such folder, no results in it, an invalid result or experiment file",
    },
    "predict": {
        EXIT_OK: "the prediction was printed",
        EXIT_USAGE: "bad option or input: an unreadable or invalid table or --measured result",
    },
    "gate": {
        EXIT_OK: "the experiment decided Pass",
        EXIT_FAIL: "the experiment decided Fail",
        EXIT_UNDECIDED: "Inconclusive, not decided yet, or decided without a verdict",
        EXIT_USAGE: "bad option or input: no such experiment or status.json",
    },
    "crd": {EXIT_OK: "the CRD was printed", EXIT_USAGE: "bad option"},
    "serving": {
        EXIT_OK: "every serving and GSM8K measurement finished",
        EXIT_FAIL: "a measurement failed or the vLLM benches could not start (results kept)",
        EXIT_USAGE: "bad option or input: invalid/unreadable file, or one without spec.serving",
    },
    "operator": {
        EXIT_OK: "the operator stopped",
        EXIT_USAGE: "bad option",
        EXIT_CONFIG: "the installed CRD is not the one it was built for (the message names the fix)",
    },
    "completion": {EXIT_OK: "the completion script was printed", EXIT_USAGE: "bad option (a shell it does not know)"},
}


def epilog(command: CommandName | None = None) -> str:
    """The exit-code table as plain text, for ``--help``; with ``command``, only the codes it exits with, each
    in that command's words (:data:`COMMAND_MEANINGS`)."""
    if command is None:
        rows = [(code, meaning) for code, _, meaning in TABLE]
    else:
        own = COMMAND_MEANINGS.get(command, {})
        rows = [(code, own.get(code, meaning)) for code, _, meaning in TABLE if code in COMMAND_CODES.get(command, ())]
    return "exit codes:\n" + "\n".join(f"  {code:>3}  {meaning}" for code, meaning in rows)
