"""Commands that talk to a cluster or to vLLM: ``spx gate``, ``spx operator``, ``spx serving``."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from rich.markup import escape

from spx.api.exit_codes import COMMAND_CODES, EXIT_FAIL, EXIT_OK, TABLE
from spx.cli.common import UnreachableError, UsageError, err_console, read_experiment
from spx.cli.registry import command


def _gate_args(p: argparse.ArgumentParser) -> None:
    from spx.cli.gate import add_arguments

    add_arguments(p)


@command("gate", "Exit with an experiment's decision (NAME or status.json): "
         + ", ".join(f"{code} {name}" for code, name, _ in TABLE if code in COMMAND_CODES["gate"]) + ".", _gate_args)
def cmd_gate(args: argparse.Namespace) -> int:
    from spx.cli.gate import run

    return run(args)


def _serving_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="experiment YAML with spec.serving (and optionally spec.accuracy); - reads standard input")
    p.add_argument("--out", type=Path, default=Path("spx-out"), metavar="DIR", help="output directory (default: spx-out)")
    p.add_argument("--vllm", default="vllm", metavar="CMD", help="the vLLM CLI (argv prefix, split on spaces)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the serving/GSM8K results of an earlier run in --out (default: refuse, so nothing "
                        "measured is lost)")


@command("serving", "Run the vLLM benches of an experiment: the serving A/B, GSM8K and the step A/B "
         "(spec.serving.step) (needs vLLM and GPUs).", _serving_args,
         outlives_stdout=True)
def cmd_serving(args: argparse.Namespace) -> int:
    """Exit 0 when every measurement finished, 1 when some failed or the benches could not start (the
    results are written either way), 3 for a file that cannot be read, is invalid or has no spec.serving."""
    from spx.runner.experiment import run_vllm_benches

    exp = read_experiment(args.file)
    if exp.spec.serving is None:
        raise UsageError(f"{args.file} has no spec.serving, so there is no vLLM bench to run; add a spec.serving "
                         "section (docs/serving.md)")
    from spx.rundir import RunDirectory
    from spx.serving.preflight import serving_problems
    from spx.serving.server import interrupts_stop_servers

    if problems := serving_problems(exp.spec, args.vllm.split()):  # before any server starts
        raise UsageError("; ".join(problems))
    from spx.vocabulary import ACCURACY_RESULT_FILE, SERVING_RESULT_FILE, STATUS_FILE, STEP_RESULT_FILE

    with RunDirectory(args.out).locked() as run_dir:  # one run at a time per --out, as spx run
        earlier = [n for n in (SERVING_RESULT_FILE, ACCURACY_RESULT_FILE, STEP_RESULT_FILE) if (args.out / n).exists()]
        if earlier and not args.overwrite:
            raise UsageError(f"--out {args.out} already holds serving results ({', '.join(earlier)}); pass "
                             "--overwrite to replace them, or choose another --out")
        run_dir.begin()
        try:
            with interrupts_stop_servers():  # SIGTERM as Ctrl-C: the servers are stopped and what ran is saved
                outcome = run_vllm_benches(exp.spec, args.out, name=exp.metadata.name, vllm_command=args.vllm.split())
        except (ValueError, OSError) as err:
            err_console().print(f"[bold red]the vLLM benches did not start:[/] {escape(str(err))}", highlight=False)
            return EXIT_FAIL
        finally:
            run_dir.stop()
            with contextlib.suppress(OSError):  # (a full disk: the benches' own error says so)
                run_dir.finish(names=())
    from spx.cli.serving_lines import bench_lines

    for line in bench_lines(outcome.status):
        print(line)
    print(f"status: {args.out / STATUS_FILE} (spx report / spx gate {args.out})")
    return EXIT_OK if outcome.complete else EXIT_FAIL


def _operator_args(p: argparse.ArgumentParser) -> None:
    from spx.controller.run import add_arguments

    add_arguments(p)


def cluster_preflight(timeout_s: float = 5.0, server: str | None = None) -> str:
    """Check, before kopf starts, that there are credentials and the API server accepts connections.

    ``server`` (the operator's ``SPX_KUBE_SERVER``, which it logs in with instead): that server. Else in
    a pod: the service account (``KUBERNETES_SERVICE_HOST`` and its token); else the kubeconfig
    (``$KUBECONFIG`` or ``~/.kube/config``), loaded with the kubernetes client. Then one TCP connection
    to the server (no request: an API server down for a moment is a restart away). Returns the server URL.

    Raises:
        UnreachableError: no credentials, a kubeconfig that cannot be loaded (:mod:`spx.cli.kubeconfig`:
            the message names the file and what is wrong), or the server refuses the connection (one line).
    """
    import socket
    from urllib.parse import urlsplit

    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    from spx.cli.kubeconfig import kubeconfig_paths, load_kubeconfig, where_looked

    cfg = client.Configuration()
    try:
        if server:
            cfg.host = server
        else:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    except ConfigException:
        paths = kubeconfig_paths()
        if not paths:
            raise UnreachableError(
                f"spx operator: no Kubernetes credentials: not in a pod, and no kubeconfig (looked at {where_looked()}); "
                "set KUBECONFIG, or run it in a pod with a service account") from None
        try:
            load_kubeconfig(cfg, paths, None)
        except UnreachableError as err:
            raise UnreachableError(f"spx operator: {err}") from None
    url = urlsplit(str(cfg.host))
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "localhost", port), timeout=timeout_s):
            pass
    except OSError as err:
        raise UnreachableError(f"spx operator: cannot reach the Kubernetes API server at {cfg.host}: "
                               f"{err.strerror or err}") from None
    return str(cfg.host)


def _login_error(exc: BaseException) -> bool:
    return type(exc).__name__ == "LoginError" or any(
        type(e).__name__ == "LoginError" for e in (exc.__cause__, exc.__context__) if e is not None)


@command("operator", "Run the Kubernetes operator (kopf) that runs ShardedProjectionExperiments as GPU Jobs.", _operator_args)
def cmd_operator(args: argparse.Namespace) -> int:
    """Run kopf; a cluster that cannot be reached (kopf's ``LoginError``) is one line, exit 4."""
    from spx.controller.run import run_operator

    try:
        return run_operator(args, preflight=lambda server: cluster_preflight(server=server))
    except Exception as exc:
        if _login_error(exc):
            raise UnreachableError(
                f"spx operator: cannot log in to a Kubernetes cluster ({str(exc)[:200]}): set KUBECONFIG to a "
                "kubeconfig whose current context can log in (or SPX_KUBE_SERVER and SPX_KUBE_TOKEN), or run it "
                "in a pod with a service account") from None
        raise
