"""Run vLLM's real CLI entry point (``vllm.entrypoints.cli.main.main``) on each argv of a JSON list
(argv[1]) and print, per argv, what it parsed, instead of starting a server or a benchmark.

Everything up to the dispatch is vLLM's own: the parser tree (``make_arg_parser`` for ``serve``,
``vllm.benchmarks.serve.add_cli_args`` for ``bench serve``, ``FlexibleArgumentParser``), the plugins
it loads while building it, and ``validate`` (``validate_parsed_serve_args``). Only the two commands'
``cmd`` (which would start a server / send requests) are replaced by a recorder. (``EngineArgs``
itself is not built: its ``__post_init__`` resolves the model on the Hub or local disk.)
Output: one line ``SPX-CLI <json>`` per argv with ``exit`` (0, the parser's exit code, or 1 and
``error`` for another exception) and ``args``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import vllm.entrypoints.cli.benchmark.serve as bench_serve
import vllm.entrypoints.cli.serve as serve
from vllm.entrypoints.cli.main import main

_parsed: dict[str, Any] = {}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return value
    return repr(value)


def _record(args: Any) -> None:
    _parsed.update({k: _plain(v) for k, v in vars(args).items()})


serve.ServeSubcommand.cmd = staticmethod(_record)  # type: ignore[method-assign]
bench_serve.BenchmarkServingSubcommand.cmd = staticmethod(_record)  # type: ignore[method-assign]

for argv in json.loads(open(sys.argv[1]).read()):
    _parsed.clear()
    sys.argv = ["vllm", *argv]
    code, error = 0, None
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:  # a validation error: report it for this argv, go on with the next
        code, error = 1, f"{type(exc).__name__}: {exc}"
    print("SPX-CLI " + json.dumps({"argv": argv, "exit": code, "error": error, "args": _parsed}), flush=True)
