"""The generated parts of ``docs/cli.md``: every command's synopsis (from its argparse parser) and the
exit codes each command uses (from :data:`spx.api.exit_codes.COMMAND_CODES`), so neither can drift.

``python -m spx.cli.reference docs/cli.md`` rewrites the blocks between the ``BEGIN generated`` and
``END generated`` markers in place; a test checks the published file is what this writes.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from spx.api.exit_codes import COMMAND_CODES, COMMAND_MEANINGS, TABLE

BEGIN = "<!-- BEGIN generated: {name} (python -m spx.cli.reference docs/cli.md) -->"
END = "<!-- END generated: {name} -->"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def synopsis(parser: argparse.ArgumentParser) -> str:
    """One line: ``spx run FILE [--out DIR] …`` — argparse's own usage of ``parser``, unwrapped, ``-h`` left out."""
    fmt = argparse.HelpFormatter(prog=parser.prog, width=100_000)
    fmt.add_usage(parser.usage, [a for a in parser._actions if not isinstance(a, argparse._HelpAction)],
                  parser._mutually_exclusive_groups, prefix="")
    return fmt.format_help().strip()


def synopses() -> str:
    """Every ``spx`` command's synopsis, in ``spx --help`` order, as a fenced block."""
    from spx.cli import build_parser

    lines = [synopsis(p) for p in _subparsers(build_parser()).values()]
    return "```\n" + "\n".join(lines) + "\n```"


def exit_codes_by_command() -> str:
    """A Markdown table: each command and the codes it exits with (names from :data:`spx.api.exit_codes.TABLE`),
    with what each means for that command where it says more than the table (``COMMAND_MEANINGS``, its ``--help``)."""
    from spx.cli import build_parser

    names = {code: name for code, name, _ in TABLE}
    rows = ["| command | exits with |", "| --- | --- |"]
    for cmd in _subparsers(build_parser()):
        own = COMMAND_MEANINGS.get(cmd, {})
        codes = "; ".join(f"{c} `{names[c]}`" + (f": {own[c]}" if c in own else "") for c in COMMAND_CODES[cmd])
        rows.append(f"| `spx {cmd}` | {codes.replace('|', chr(92) + '|')} |")
    return "\n".join(rows)


GENERATED = {"synopsis": synopses, "exit-codes-by-command": exit_codes_by_command}


def render(text: str) -> str:
    """``text`` with every generated block replaced by what the parsers and the table say now.

    Raises:
        ValueError: a block's markers are missing.
    """
    for name, make in GENERATED.items():
        begin, end = BEGIN.format(name=name), END.format(name=name)
        pattern = re.compile(re.escape(begin) + r"\n(?:.*?\n)?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise ValueError(f"docs: no generated block {name!r} (markers {begin} … {end})")
        block = f"{begin}\n{make()}\n{end}"
        text = pattern.sub(lambda _m, block=block: block, text, count=1)
    return text


if __name__ == "__main__":
    doc = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/cli.md")
    from spx.files import write_atomic

    write_atomic(doc, render(doc.read_text(encoding="utf-8")))
    print(doc)
