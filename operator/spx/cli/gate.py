"""``spx gate NAME | status.json``: turn an experiment's verdict into a release pipeline's exit code.

Exit codes (:mod:`spx.api.exit_codes`, ``docs/cli.md``; the same in ``examples/gating/wait-for-verdict.sh``):

* ``0`` — the experiment decided **Pass**: splitting by token wins at and above the threshold.
* ``1`` — it decided **Fail**.
* ``2`` — **Inconclusive**, not decided yet (still running, or the status is for an older generation
  of the spec), or decided without a verdict (InvalidSpec, BenchmarkFailed, InfraFailed).
* ``3`` — usage: a bad option, no such file, a file that is not a status document, no such experiment.
* ``4`` — unreachable: no kubeconfig, the API server cannot be reached, or it refused access.

The decision is the ``Decided`` condition's: its reason (``Pass``/``Fail``/``Inconclusive``, or why
there is no verdict) in a terminal phase decides, and a ``verdict`` field that disagrees with it, or
stands without a ``Decided`` condition, is not trusted (the message says so).

The argument is either a local ``spx run`` output (``status.json`` or the ``--out`` directory holding
it) or the name of a ``ShardedProjectionExperiment``, read through kubeconfig (``--kubeconfig``,
``--context``, ``-n/--namespace``; in a pod, the service account). ``--wait SECONDS`` polls until a
decision or the deadline.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from spx.analysis.gate_decision import DECISION_FIELDS as DECISION_FIELDS  # (re-exported: the pure decision)
from spx.analysis.gate_decision import EXIT_BY_VERDICT as EXIT_BY_VERDICT
from spx.analysis.gate_decision import UNREAD_REASONS as UNREAD_REASONS
from spx.analysis.gate_decision import GateResult as GateResult
from spx.analysis.gate_decision import decision_status as decision_status
from spx.analysis.gate_decision import gate_decision as gate_decision
from spx.api.exit_codes import EXIT_FAIL as EXIT_FAIL
from spx.api.exit_codes import EXIT_OK as EXIT_PASS  # noqa: F401  (re-exported)
from spx.api.exit_codes import EXIT_UNDECIDED, EXIT_UNREACHABLE, EXIT_USAGE
from spx.api.spec import GROUP, PLURAL, VERSION
from spx.vocabulary import OUTPUT_FORMATS, RESULT_FILE, STATUS_FILE

#: The gate's decision (:func:`spx.analysis.gate_decision.gate_decision`), by its older name.
decide = gate_decision


class GateError(Exception):
    """The experiment or its status could not be read: ``exit_code`` 3 (usage) or 4 (unreachable);
    ``retry`` false where waiting cannot help (a missing or malformed kubeconfig)."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE, *, retry: bool = True) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.retry = retry


# --------------------------------------------------------------------------- readers


def read_local(path: Path | str) -> tuple[dict[str, Any], int | None]:
    """``(status, metadata.generation)`` of a local file: a ``spx run`` output (``status.json`` or its
    directory; no generation) or a whole object dumped by ``kubectl get spx NAME -o json``. Messages
    name the path as given (``./x`` stays ``./x``)."""
    import os.path

    raw = str(path)
    path = Path(raw)
    target = os.path.join(raw, STATUS_FILE) if path.is_dir() else raw
    from spx.rundir import RunDirectoryError, read_json

    try:
        data = read_json(target, "the status.json that `spx run --out DIR` writes")
    except RunDirectoryError as err:
        raise GateError(str(err)) from None
    if not isinstance(data, dict):
        raise GateError(f"{target}: expected a JSON object (an ExperimentStatus), got a JSON {type(data).__name__}")
    if "kind" in data:  # a whole object (`kubectl get spx NAME -o json > x.json`)
        if data.get("kind") != "ShardedProjectionExperiment":
            raise GateError(f"{target} is a {str(data.get('kind'))[:60]!r} object, not a ShardedProjectionExperiment: "
                            "pass `kubectl get spx NAME -o json` of one experiment, or its status.json")
        status = data.get("status", {})  # none yet: not reconciled, so not decided
        if not isinstance(status, dict):
            raise GateError(f"{target}: .status is not a mapping (got {str(status)[:80]!r})")
        metadata = data.get("metadata")
        generation = metadata.get("generation") if isinstance(metadata, dict) else None
        try:
            return check_status(status, target, whole_object=True), int(generation) if generation is not None else None
        except (TypeError, ValueError):
            raise GateError(f"{target}: metadata.generation is not an integer: {generation!r}") from None
    return check_status(data, target), None


def check_status(data: dict[str, Any], target: str, whole_object: bool = False) -> dict[str, Any]:
    """``data`` when it is shaped like an ExperimentStatus; else a :class:`GateError` (exit 3) saying what the
    file is instead and what to pass (a run's ``result.json`` names its ``status.json`` and directory).
    ``whole_object``: the ``.status`` of a ``kubectl get -o json`` dump, empty before the first reconcile."""
    import os.path

    from spx.api.loading import STATUS_FIELDS, kind_of

    kind = str(data.get("schemaVersion") or "")
    if kind_of(data) == "result":
        run_dir = os.path.dirname(target) or "."
        raise GateError(f"{target} is a run's result, not a status: pass {os.path.join(run_dir, STATUS_FILE)} "
                        f"or the run directory {run_dir}")
    if kind:
        raise GateError(f"{target} is a {kind[:60]} document, not an experiment status: pass a run's status.json, "
                        "its directory, or `kubectl get spx NAME -o json`")
    if data and not whole_object and not STATUS_FIELDS.keys() & data.keys():
        keys = ", ".join(sorted(str(k)[:40] for k in data)[:8])
        raise GateError(f"{target} is not an experiment status (it has none of {', '.join(STATUS_FIELDS)}; its keys: "
                        f"{keys}): pass a run's status.json, its directory, or `kubectl get spx NAME -o json`")
    if not data and not whole_object:
        raise GateError(f"{target} is an empty JSON object, not an experiment status: pass a run's status.json")
    for key, typ in STATUS_FIELDS.items():
        value = data.get(key)
        if value is not None and (not isinstance(value, typ) or isinstance(value, bool)):
            raise GateError(f"{target}: {key} must be a {typ.__name__} in an experiment status (got {str(value)[:80]!r})")
    if not all(isinstance(c, dict) for c in data.get("conditions") or []):
        raise GateError(f"{target}: conditions must be a list of mappings (type, status, reason) in an experiment status")
    return data


def read_cluster(
    name: str, namespace: str | None, kubeconfig: str | None, context: str | None
) -> tuple[dict[str, Any], int | None, str]:
    """``(status, metadata.generation, "namespace/name")`` of a ShardedProjectionExperiment."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    from spx.cli.common import UnreachableError
    from spx.cli.kubeconfig import kubeconfig_paths, load_kubeconfig, namespace_of, where_looked

    cfg = client.Configuration()
    try:
        paths = kubeconfig_paths(kubeconfig)
        if paths:
            load_kubeconfig(cfg, paths, context)
        elif context:
            raise UnreachableError(f"--context {context}: no kubeconfig to take it from (looked at {where_looked()})")
        else:
            try:
                config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            except ConfigException:
                raise UnreachableError(f"no kubeconfig (looked at {where_looked()}) and not in a pod: set KUBECONFIG "
                                       "or pass --kubeconfig") from None
    except UnreachableError as err:
        raise GateError(str(err), EXIT_UNREACHABLE, retry=False) from None  # (waiting cannot fix a kubeconfig)
    api_client = client.ApiClient(cfg)
    ns = namespace or namespace_of(paths, context)
    api = client.CustomObjectsApi(api_client)
    try:
        obj = cast(dict[str, Any], api.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name))
    except ApiException as err:
        if err.status == 404:
            raise GateError(f"shardedprojectionexperiment {ns}/{name} not found (check the name and -n/--namespace)") from None
        raise GateError(f"reading {ns}/{name}: HTTP {err.status} {err.reason}", EXIT_UNREACHABLE) from None
    except Exception as err:  # connection refused, DNS, TLS
        raise GateError(f"cannot reach the cluster reading {ns}/{name}: {str(err)[:300]}", EXIT_UNREACHABLE) from None
    finally:
        api_client.close()  # type: ignore[no-untyped-call]
    generation = (obj.get("metadata") or {}).get("generation")
    return obj.get("status") or {}, int(generation) if generation is not None else None, f"{ns}/{name}"


def check_names(name: str, namespace: str | None) -> None:
    """Refuse, before any cluster is contacted, a NAME that is not a Kubernetes object name (DNS-1123
    subdomain) or a ``-n`` that is not a namespace name (DNS-1123 label): a :class:`GateError`, exit 3.
    The rule is the experiment's own ``metadata`` (:class:`spx.api.spec.ObjectMeta`)."""

    from spx.api.spec import ObjectMeta

    try:
        ObjectMeta.model_validate({"name": name, **({"namespace": namespace} if namespace is not None else {})})
        return
    except ValidationError as err:
        bad = {str(e["loc"][0]) for e in err.errors()}
    if "name" in bad:
        raise GateError(f"NAME {name[:80]!r} is not a valid experiment name: a Kubernetes object name is a DNS-1123 "
                        "subdomain (at most 253 lower-case letters, digits, '-' and '.', starting and ending with a "
                        "letter or digit); to read a local file, give its path (e.g. ./status.json)")
    raise GateError(f"-n/--namespace {str(namespace)[:80]!r} is not a valid namespace name: a DNS-1123 label (at "
                    "most 63 lower-case letters, digits and '-', starting and ending with a letter or digit)")


def _is_local(target: str) -> bool:
    return target.endswith(".json") or "/" in target or Path(target).exists()


def judged_result(run_dir: Path, target: str) -> GateResult | None:
    """The decision on a run folder whose ``status.json`` cannot be read (empty, not JSON, not a JSON object) but
    whose ``result.json`` can: that result judged (:func:`spx.analysis.judge.judge`, the one judgement ``spx report``
    falls back to as well), the message saying so; ``None`` when the status is readable or there is no result."""
    status_path, result_path = run_dir / STATUS_FILE, run_dir / RESULT_FILE
    if not status_path.is_file() or not result_path.is_file():
        return None
    try:
        data = json.loads(status_path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data:
            return None
        why = "empty, or not a JSON object"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        why = str(err)[:200]
    from spx.analysis.judge import judge, local_status
    from spx.api import KernelResult
    from spx.api.base import utc_now

    try:
        result = KernelResult.model_validate_json(result_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValidationError, ValueError):
        return None
    status = local_status(judge(result, result.spec), now=utc_now(), environment=result.environment)
    decision = decide(status, target)
    decision.message = f"{status_path} cannot be read ({why}): judged {result_path}, as spx report does; " + \
        decision.message
    return decision


def read_and_decide(
    target: str, namespace: str | None = None, kubeconfig: str | None = None, context: str | None = None
) -> GateResult:
    """Read ``target`` (a local path or an experiment name) once and decide."""
    try:
        if _is_local(target):
            from spx.rundir import RunDirectory

            run_dir = RunDirectory(target if os.path.isdir(target) else Path(target).parent)
            if holder := run_dir.in_progress():
                return GateResult(EXIT_UNDECIDED, target, False, phase="Running",
                                  message=f"a run is in progress ({holder}); its status.json is written when it ends")
            if not run_dir.status_path.exists() and (killed := run_dir.killed()):
                return GateResult(EXIT_UNDECIDED, target, False, message=killed)
            if fallback := judged_result(Path(target) if os.path.isdir(target) else Path(target).parent, target):
                return fallback
            local, local_generation = read_local(target)
            return decide(local, target, local_generation)
        check_names(target, namespace)
        status, generation, source = read_cluster(target, namespace, kubeconfig, context)
        return decide(status, source, generation)
    except GateError as err:
        reason = "Unreachable" if err.exit_code == EXIT_UNREACHABLE else "Unreadable"
        return GateResult(err.exit_code, target, False, message=str(err), reason=reason, retry=err.retry)


# --------------------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``spx gate`` arguments (shared by ``spx gate`` and ``python -m spx.cli.gate``)."""
    parser.add_argument(
        "target",
        metavar="NAME|status.json",
        help="experiment name (read through kubeconfig), or a local spx run output: status.json, its directory, "
        "or a `kubectl get -o json` dump (anything ending in .json, containing a /, or existing here is a path)",
    )
    parser.add_argument("-n", "--namespace", help="namespace of the experiment (default: the kubeconfig context's)")
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config; in a pod, the service account)"
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="poll until the experiment is decided or SECONDS pass (default: read once)",
    )
    parser.add_argument(
        "--interval", type=float, default=10.0, metavar="SECONDS", help="poll interval with --wait (default 10)"
    )
    parser.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default=None,
                        help="output format (default text); json/yaml: one document, schema docs/schemas/gate.schema.json")
    parser.add_argument("--json", action="store_true", help="the same as -o json (not with another -o)")


def document(result: GateResult) -> dict[str, Any]:
    """The ``-o json`` document of a decision (``docs/schemas/gate.schema.json``)."""
    from spx.api.base import dump_model
    from spx.cli.documents import GateDocument

    return dump_model(GateDocument.model_validate({k: v for k, v in asdict(result).items() if k != "retry"}))


def run(args: argparse.Namespace) -> int:
    """Run the gate for parsed arguments; returns the exit code (0 Pass, 1 Fail, 2 undecided, 3 usage,
    4 unreachable). With ``--wait`` an unreachable cluster is retried until the deadline; a usage error
    (no such file or experiment) and a missing or malformed kubeconfig are not."""
    problem = None
    if not math.isfinite(args.wait) or args.wait < 0:
        problem = f"--wait must be a number of seconds >= 0, e.g. --wait 600 (got {args.wait})"
    elif not math.isfinite(args.interval) or args.interval <= 0:
        problem = f"--interval must be a number of seconds > 0, e.g. --interval 10 (got {args.interval})"
    elif args.json and args.output not in (None, "json"):
        problem = f"--json and -o {args.output} contradict each other: give one of them (--json is -o json)"
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)  # (as every other usage error of spx words it)
        return EXIT_USAGE
    deadline = time.monotonic() + args.wait
    while True:
        result = read_and_decide(args.target, args.namespace, args.kubeconfig, args.context)
        if result.decided or result.exit_code == EXIT_USAGE or not result.retry or time.monotonic() >= deadline:
            break
        time.sleep(max(0.1, min(args.interval, deadline - time.monotonic())))
    fmt = "json" if args.json else args.output or "text"
    if fmt == "json":
        print(json.dumps(document(result), sort_keys=True))
    elif fmt == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(document(result), sort_keys=True, allow_unicode=True))
    else:
        stream = sys.stderr if result.unread else sys.stdout
        print(result.line(), file=stream)
    return result.exit_code


def main(argv: list[str] | None = None) -> int:
    """``python -m spx.cli.gate``: the same as ``spx gate``."""
    parser = argparse.ArgumentParser(
        prog="spx gate", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    from spx.cli.streams import degrade_unencodable_characters, internal_error

    degrade_unencodable_characters()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code not in (0, None) else 0
    try:
        return run(args)
    except Exception as exc:  # a bug: never exit 1, which is Fail
        return internal_error(exc)


if __name__ == "__main__":
    raise SystemExit(main())
