"""Reading a kubeconfig for ``spx gate`` and ``spx operator``: every problem is one line naming the file.

The kubernetes client reads a kubeconfig with ``yaml.safe_load`` and indexes into it, so a binary
file surfaces as a ``UnicodeDecodeError`` traceback and a malformed one as a ``KeyError`` or
``TypeError``. :func:`check_kubeconfig` reads each file first and says what is wrong with it
(unreadable, not UTF-8, not YAML, empty, not a mapping, entries without names);
:func:`load_kubeconfig` then loads it and turns every remaining client error into the same
one-line :class:`~spx.cli.common.UnreachableError` (exit code 4, the cluster-access code).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from spx.cli.common import UnreachableError

if TYPE_CHECKING:
    from kubernetes.client import Configuration

#: Where the kubernetes client looks when neither ``--kubeconfig`` nor ``$KUBECONFIG`` says.
DEFAULT_KUBECONFIG = "~/.kube/config"
_NAMED_LISTS = ("clusters", "contexts", "users")


def kubeconfig_paths(explicit: str | None = None) -> list[str]:
    """The kubeconfig files that exist, in the client's order: ``explicit``, else ``$KUBECONFIG``
    (``:``-separated), else ``~/.kube/config``.

    Raises:
        UnreachableError: ``explicit`` names a file that does not exist.
    """
    if explicit:
        if not os.path.exists(explicit):
            raise UnreachableError(f"kubeconfig {explicit}: no such file (--kubeconfig names the file to read)")
        return [explicit]
    listed = os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    return [p for p in (os.path.expanduser(s) for s in listed.split(os.pathsep) if s) if os.path.exists(p)]


def where_looked() -> str:
    """Where :func:`kubeconfig_paths` looked without ``--kubeconfig``, for "no kubeconfig" messages."""
    listed = os.environ.get("KUBECONFIG")
    return f"$KUBECONFIG={listed[:200]}" if listed else DEFAULT_KUBECONFIG


def check_kubeconfig(path: str) -> dict[str, Any]:
    """The parsed kubeconfig at ``path``.

    Raises:
        UnreachableError: it cannot be read, is not UTF-8 text, is not YAML, is empty, is not a mapping,
            or its clusters/contexts/users are not lists of named entries (one line naming ``path``).
    """
    import yaml

    try:
        with open(path, "rb") as f:
            raw = f.read(4 * 1024 * 1024 + 1)
    except OSError as err:
        raise UnreachableError(f"kubeconfig {path}: cannot read it: {err.strerror or err}") from None
    if len(raw) > 4 * 1024 * 1024:
        raise UnreachableError(f"kubeconfig {path} is malformed: larger than 4 MiB, not a kubeconfig")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UnreachableError(f"kubeconfig {path} is not a UTF-8 text file (byte 0x{raw[err.start]:02x} at offset "
                               f"{err.start}): give a kubeconfig YAML") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UnreachableError(f"kubeconfig {path} is malformed: not valid YAML ({problem}{where})") from None
    if data is None:
        raise UnreachableError(f"kubeconfig {path} is malformed: the file is empty")
    if not isinstance(data, dict):
        raise UnreachableError(f"kubeconfig {path} is malformed: expected a mapping with clusters, contexts and "
                               f"users, got a YAML {type(data).__name__}")
    for key in _NAMED_LISTS:
        entries = data.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("name"), str)
                                                    for e in entries):
            raise UnreachableError(f"kubeconfig {path} is malformed: {key} must be a list of entries, each with "
                                   f"a name (got {str(entries)[:80]!r})")
    return data


def load_kubeconfig(cfg: Configuration, paths: list[str], context: str | None) -> None:
    """Load the kubeconfig ``paths`` (checked by :func:`check_kubeconfig`) into ``cfg``.

    Raises:
        UnreachableError: a file is malformed, or the client refuses it (no such context, no current
            context, a missing certificate file): one line naming the file(s).
    """
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    for path in paths:
        check_kubeconfig(path)
    names = ", ".join(paths)
    try:
        config.load_kube_config(config_file=os.pathsep.join(paths), context=context,  # type: ignore[no-untyped-call]
                                client_configuration=cfg, persist_config=False)
    except ConfigException as err:
        raise UnreachableError(f"kubeconfig {names}: {str(err)[:300]}") from None
    except (OSError, KeyError, TypeError, ValueError, AttributeError) as err:
        what = err.strerror if isinstance(err, OSError) and err.strerror else str(err)[:200]
        raise UnreachableError(f"kubeconfig {names} is malformed: {what or 'an entry of an unexpected shape'}") from None


def namespace_of(paths: list[str], context: str | None) -> str:
    """The namespace of ``context`` (default: the current one) in the kubeconfig ``paths``; without a
    kubeconfig (in a pod), the service account's; else ``default``."""
    from kubernetes import config

    if paths:
        try:
            contexts, active = config.list_kube_config_contexts(config_file=os.pathsep.join(paths))  # type: ignore[no-untyped-call]
        except Exception:  # already loaded once: a file that changed since falls back to "default"
            return "default"
        chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
        return str(((chosen or {}).get("context") or {}).get("namespace") or "default")
    sa_ns = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    try:
        with open(sa_ns, encoding="utf-8") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"
