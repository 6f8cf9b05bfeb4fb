"""``spx validate FILE`` (the normalised experiment, or why it is invalid), ``spx crd``, ``spx completion``."""

from __future__ import annotations

import argparse
import sys

from spx.api import SpecError, dump_model
from spx.api.exit_codes import EXIT_OK, EXIT_USAGE
from spx.api.spec import Experiment
from spx.cli.common import add_output_option, emit, err_console, problems_of, read_experiment, source_name
from spx.cli.documents import ValidateDocument
from spx.cli.registry import command
from spx.rundir import RunDirectoryError
from spx.vocabulary import COMPLETION_SHELLS


def _validate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="experiment YAML; - reads standard input")
    add_output_option(p, "validate.schema.json")


@command("validate", "Validate an experiment file and print it normalised (defaults filled in).", _validate_args)
def cmd_validate(args: argparse.Namespace) -> int:
    import yaml

    if args.output != "text":
        exp: Experiment | None = None
        try:
            exp = read_experiment(args.file)
            problems: list[str] = []
        except (SpecError, RunDirectoryError) as err:
            problems = problems_of(err)
        emit(ValidateDocument(source=source_name(args.file), valid=exp is not None, problems=problems, experiment=exp), args.output)
        return EXIT_OK if exp is not None else EXIT_USAGE
    exp = read_experiment(args.file)
    sys.stdout.write(yaml.safe_dump(dump_model(exp), sort_keys=False, allow_unicode=True))
    err_console().print(f"{source_name(args.file)}: valid", highlight=False, markup=False)
    return EXIT_OK


@command("crd", "Print the ShardedProjectionExperiment CustomResourceDefinition (YAML).")
def cmd_crd(args: argparse.Namespace) -> int:
    from spx.api.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return EXIT_OK


def _completion_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=COMPLETION_SHELLS, help="the shell to complete for")


@command("completion", "Print a shell completion script: `source <(spx completion bash)`, or save it under "
         "/etc/bash_completion.d/spx (zsh: a _spx file on $fpath).", _completion_args)
def cmd_completion(args: argparse.Namespace) -> int:
    import shtab  # iterative/shtab: completion scripts generated from the argparse parser

    from spx.cli.registry import build_parser

    sys.stdout.write(shtab.complete(build_parser(), shell=args.shell))
    return EXIT_OK
