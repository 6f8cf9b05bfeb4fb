"""``spx operator``: run the kopf operator with spx's defaults.

Equivalent to ``kopf run -m spx.controller --standalone --log-format=json --liveness=… -A`` plus
``SPX_*`` environment variables for the operator's own settings (see
:mod:`spx.controller.settings`); options given here override the environment. The settings go to
the handlers through kopf's ``memo`` (the environment is read, never written).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from spx.api.exit_codes import EXIT_INTERRUPTED, EXIT_USAGE
from spx.vocabulary import LOG_FORMATS

DEFAULT_LIVENESS = "http://0.0.0.0:8081/healthz"


def kopf_run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``kopf.run`` for parsed ``spx operator`` options (:func:`add_arguments`):
    standalone unless ``--peering`` names a peering, cluster-wide when no namespace is given (or ``-A``),
    no liveness endpoint for ``--liveness ''``. The one place :func:`run_operator` takes them from."""
    namespaces = list(args.namespaces)
    return {"standalone": not args.peering, "peering_name": args.peering or None,
            "liveness_endpoint": args.liveness or None,
            "clusterwide": args.all_namespaces or not namespaces, "namespaces": namespaces}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``spx operator`` (for the CLI's sub-parser)."""
    parser.add_argument("-n", "--namespace", action="append", default=[], dest="namespaces",
                        help="namespace to watch (repeatable; glob patterns allowed); default: all")
    parser.add_argument("-A", "--all-namespaces", action="store_true", help="watch all namespaces (default)")
    parser.add_argument("--liveness", default=DEFAULT_LIVENESS,
                        help=f"liveness endpoint URL, '' to disable (default {DEFAULT_LIVENESS})")
    parser.add_argument("--log-format", default="json", choices=LOG_FORMATS, help="log format")
    parser.add_argument("--peering", default=None, help="kopf peering name (default: standalone)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--max-concurrent", type=int, default=None,
                        help="experiments running at once, the rest wait Queued; 0 = no limit [SPX_MAX_CONCURRENT_EXPERIMENTS]")
    parser.add_argument("--bench-image", default=None, help="default bench image [SPX_BENCH_IMAGE]")
    parser.add_argument("--metrics-port", type=int, default=None, help="Prometheus port, 0 = off [SPX_METRICS_PORT]")
    parser.add_argument("--schedule-timeout", type=float, default=None,
                        help="seconds a pod may stay unschedulable [SPX_SCHEDULE_TIMEOUT_SECONDS]")


#: ``spx operator`` options → settings fields.
_OPTIONS = {"max_concurrent": "max_concurrent", "bench_image": "bench_image", "metrics_port": "metrics_port",
            "schedule_timeout": "schedule_timeout_s"}


def run_operator(args: argparse.Namespace, preflight: Callable[[str | None], object] | None = None) -> int:
    """Validate the configuration, then run kopf in this process (blocks until the operator exits).

    ``preflight(SPX_KUBE_SERVER or None)`` runs between the two (``spx operator``: is the cluster reachable).
    """
    from spx.controller.settings import load_settings

    try:
        overrides = {field: getattr(args, opt, None) for opt, field in _OPTIONS.items()}
        if args.namespaces and not args.all_namespaces:
            overrides["watch_namespaces"] = tuple(args.namespaces)
        settings = load_settings(**overrides)
    except ValueError as err:  # a bad SPX_* variable (SPX_POLICY included): one line naming it
        print(f"spx operator: {err}", file=sys.stderr)
        return EXIT_USAGE
    if preflight is not None:
        preflight(settings.kube_server)
    import kopf

    from spx.controller.decide import crd_check
    from spx.controller.handlers import CrdMismatch  # (the import registers the handlers)

    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat[args.log_format.upper()])
    try:
        kopf.run(**kopf_run_options(args), memo=kopf.Memo(settings=settings))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:
        mismatch = _cause(exc, CrdMismatch)
        if mismatch is None:
            raise
        print(f"spx operator: {mismatch}", file=sys.stderr)  # what is wrong and the command that fixes it
        return crd_check.EXIT_CODE
    return 0


def _cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``exc`` or the first exception of type ``kind`` it was raised from (kopf wraps a failed start-up
    handler's error in its ``ActivityError``)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, kind):
            return e
        todo += [e.__cause__, e.__context__]
        todo += [o.exception for o in (getattr(e, "outcomes", None) or {}).values() if getattr(o, "exception", None)]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spx operator", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run_operator(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
