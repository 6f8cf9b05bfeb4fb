"""``spx`` — the command line: run an experiment on this host, validate it, print the CRD, report, predict, gate.

A thin layer: the experiment pipeline itself is :func:`spx.runner.experiment.run_experiment`.
One module per command group: :mod:`spx.cli.run` (``run``), :mod:`spx.cli.validate` (``validate``,
``crd``, ``completion``), :mod:`spx.cli.report` (``report``), :mod:`spx.cli.predict` (``predict``),
:mod:`spx.cli.cluster` (``gate``, ``operator``, ``serving``); the registry is :mod:`spx.cli.registry`.
Exit codes: one table for every command, :mod:`spx.api.exit_codes` (``docs/cli.md``).
"""

from __future__ import annotations

import argparse
import sys

from rich.markup import escape

from spx.api import SpecError
from spx.api.exit_codes import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from spx.cli import cluster, predict, report, run, validate  # noqa: F401  (importing registers their commands)
from spx.cli.common import UnreachableError, UsageError, apply_overrides, err_console, parse_tokens
from spx.cli.registry import COMMANDS, build_parser, command
from spx.cli.streams import degrade_unencodable_characters, internal_error, pipe_safe_streams, stdout_closed
from spx.rundir import RunDirectoryError


def _error(message: str) -> None:
    err_console().print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``spx`` console script; returns the exit code (:mod:`spx.api.exit_codes`).

    Usage errors (argparse's own included) are 3, an unreachable cluster 4, Ctrl-C 130 with one line, a
    closed stdout or stderr 141 and nothing printed (``spx run`` and ``spx serving`` go on, write their files
    and exit with their own code: :mod:`spx.cli.streams`), an exception no command expected 70 (never 1, which
    ``spx gate`` means as Fail). A character the output's encoding cannot show is written as an ASCII stand-in.
    """
    degrade_unencodable_characters()
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse: --help → 0, bad usage → 2 (ours: 3)
            sys.stdout.flush()
            return EXIT_OK if exc.code in (0, None) else EXIT_USAGE
    except BrokenPipeError:  # `spx --help | head -1`
        return stdout_closed()
    if COMMANDS[args.command].outlives_stdout:
        # `spx run … 2>&1 | head -1`: a closed reader drops output, not the run (nor its error message's exit code)
        with pipe_safe_streams():
            return _dispatch(args)
    return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command; map its errors to exit codes (:func:`main`)."""
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # a reader that has gone shows here, not in the interpreter's last flush
        return code
    except (RunDirectoryError, SpecError) as exc:
        _error(str(exc))
        return EXIT_USAGE
    except UnreachableError as exc:
        _error(str(exc))
        return EXIT_UNREACHABLE
    except KeyboardInterrupt as exc:
        stopped = {"run": ": nothing was started, or every started rank and vLLM server was stopped",
                   "serving": ": every vLLM server spx started was stopped"}.get(args.command, "")
        err_console().print(f"{str(exc) or 'interrupted (Ctrl-C)'}{stopped}",
                            highlight=False, markup=False, soft_wrap=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `spx crd | head -1`: stop quietly, exit 141 as SIGPIPE would
        return stdout_closed()
    except Exception as exc:  # a bug: never exit 1 (spx gate's Fail, spx run's failed benchmark)
        return internal_error(exc)


__all__ = [
    "COMMANDS", "EXIT_FAIL", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_UNREACHABLE", "EXIT_USAGE",
    "UnreachableError", "UsageError", "apply_overrides", "build_parser", "command", "main", "parse_tokens",
]

if __name__ == "__main__":
    sys.exit(main())
