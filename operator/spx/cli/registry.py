"""The ``spx`` command registry: every subcommand registers its options and handler here, in one place.

Adding a command: in a module of :mod:`spx.cli`, write ``_NAME_args(parser)`` (its options) and
``cmd_NAME(args) -> int`` (returns an exit code of :mod:`spx.api.exit_codes`) and decorate the handler with
``@command("NAME", "help", _NAME_args)``; list the module in ``spx/cli/__init__.py``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spx.api.exit_codes import epilog
from spx.vocabulary import COMMAND_NAMES, CommandName

Handler = Callable[[argparse.Namespace], int]
Configure = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Command:
    """One ``spx`` subcommand: its name, ``--help`` line, option builder and handler (returns the exit code).

    ``outlives_stdout``: a reader closing stdout or stderr (``| head -1``, ``2>&1 | head -1``) does not stop it;
    the rest of that stream's output is dropped and it exits with the code of what it did (``spx run``: the results
    are files). Other commands stop at once with exit code 141, as a tool killed by SIGPIPE (:mod:`spx.cli.streams`).
    """

    name: CommandName
    help: str
    configure: Configure
    handler: Handler
    outlives_stdout: bool = False


#: Every ``spx`` subcommand, by name.
COMMANDS: dict[CommandName, Command] = {}
#: The order ``spx --help`` lists the commands in (others follow in registration order).
HELP_ORDER = COMMAND_NAMES


def command(name: CommandName, help: str, configure: Configure | None = None, *,
            outlives_stdout: bool = False) -> Callable[[Handler], Handler]:
    """Register ``handler`` as ``spx NAME``; ``configure`` adds its options to its subparser
    (``outlives_stdout``: :class:`Command`).

    Raises:
        ValueError: ``name`` is registered twice.
    """

    def register(handler: Handler) -> Handler:
        if name in COMMANDS:
            raise ValueError(f"spx command {name!r} registered twice")
        COMMANDS[name] = Command(name, help, configure or (lambda p: None), handler, outlives_stdout)
        return handler

    return register


class SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser that refuses arguments it does not know itself, so the error shows *its*
    usage (``spx crd extra`` → ``usage: spx crd``), not the top-level ``spx`` usage argparse would print
    after handing the leftovers back up."""

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Parse ``args``; an argument this subcommand does not take is an error with this subcommand's usage."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    """The ``spx`` argument parser: one subparser per :data:`COMMANDS` entry, its handler in ``handler``."""
    from spx import __version__

    parser = argparse.ArgumentParser(
        prog="spx",
        description="Measure when splitting a TP projection by token (+ all-gather) beats computing it replicated.",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"spx {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=SubcommandParser)
    rank = {name: i for i, name in enumerate(HELP_ORDER)}
    for cmd in sorted(COMMANDS.values(), key=lambda c: rank.get(c.name, len(rank))):
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help, epilog=epilog(cmd.name),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        cmd.configure(p)
        p.set_defaults(handler=cmd.handler)
    return parser
