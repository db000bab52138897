"""Redis ACL users per role: each service's credential reaches only the keys and commands it uses.

One Redis password for everyone let anything that held it bypass every gRPC check (rewrite a
node's address, delete the audit stream). Instead the store has one user per role, each with its
own password, and the ``default`` user is off:

- ``coordinator``: every key of the namespace, every command but the dangerous and admin ones
  (no FLUSHALL, CONFIG, ACL, KEYS, DEBUG, SHUTDOWN, MONITOR); it owns the fleet's state.
- ``estimator``: its models (``blob*:estimator-model``) read-write; measurements read-only; the
  audit stream append-only (XADD).
- ``optimizer``: its search sessions (``doc*:optimizer-session``, the doc revision counter) and
  their owners (``kv:owner:optimizer-session:*``) read-write; the audit stream append-only.
- ``probe``: PING only (the kubelet's redis-cli probes).

Agents have no user: they reach their node's jobs through the coordinator (``NodeJobs``).
Restrictions by command on a key need Redis >= 7 ACL selectors (``(~pattern +command)``), as the
chart's Redis 7.2 has. What a rule cannot say: XADD's ``MAXLEN`` trims, so a user that may append to
the audit stream could also shorten it; only the control-plane services (never a Jetson) may.

:func:`acl_file` writes the users (passwords as ``#<sha256>``, so the file holds no password);
``python -m edgetune.store.acl --password-dir DIR`` prints it for passwords in ``DIR/<role>``
(what the chart's Redis reads when you bring your own Secret).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Mapping
from pathlib import Path

from .base import DEFAULT_NAMESPACE, escape_part

ROLES = ("coordinator", "estimator", "optimizer", "probe")
#: Commands any user needs on its connection (no keys).
_CONNECTION = "+ping +client|setname +client|getname +client|id +hello +auth +select +echo +time +multi +exec +discard +unwatch"
#: The estimator's models and the optimizer's sessions (the kinds their stores write).
MODEL_KIND = "estimator-model"
SESSION_KIND = "optimizer-session"


def rules(role: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The ACL rules (after the user name and password) of ``role``."""
    ns = escape_part(namespace)
    audit = f"(~{ns}:audit +xadd)"
    if role == "coordinator":
        return f"~{ns}:* resetchannels -@all +@all -@dangerous -@admin +info"
    if role == "estimator":
        return (f"resetkeys resetchannels -@all {_CONNECTION} "
                f"({_keys(ns, 'blob', MODEL_KIND)} +@read +@write +@scripting -@dangerous) "
                f"(%R~{ns}:meas:* %R~{ns}:meas-index:* +@read -@dangerous) {audit}")
    if role == "optimizer":
        return (f"resetkeys resetchannels -@all {_CONNECTION} "
                f"({_keys(ns, 'doc', SESSION_KIND)} ~{ns}:doc-rev ~{ns}:kv:owner:{SESSION_KIND}:* "
                f"+@read +@write +watch -@dangerous) {audit}")
    if role == "probe":
        return "resetkeys resetchannels -@all +ping +hello +auth"
    raise ValueError(f"unknown role {role!r} (allowed: {', '.join(ROLES)})")


def _keys(ns: str, family: str, kind: str) -> str:
    if family == "blob":
        return f"~{ns}:blob:{kind}:* ~{ns}:blob-latest:{kind}:* ~{ns}:blob-index:{kind}"
    return f"~{ns}:doc:{kind}:* ~{ns}:doc-index:{kind}"


def password_hash(password: str) -> str:
    """Redis' ``#<hex>`` form of a password (its SHA-256)."""
    return "#" + hashlib.sha256(password.encode()).hexdigest()


def acl_file(passwords: Mapping[str, str], namespace: str = DEFAULT_NAMESPACE) -> str:
    """The ``aclfile`` of the store: ``default`` off, one user per role of ``passwords`` (hashed)."""
    lines = ["user default off resetkeys resetchannels -@all"]
    for role in ROLES:
        if role in passwords:
            lines.append(f"user {role} on {password_hash(passwords[role])} {rules(role, namespace)}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m edgetune.store.acl", description=__doc__.split("\n")[0])
    parser.add_argument("--password-dir", required=True, help="a file per role (coordinator, estimator, ...) "
                        "holding its password")
    parser.add_argument("--namespace", default=DEFAULT_NAMESPACE)
    args = parser.parse_args(argv)
    folder = Path(args.password_dir)
    passwords = {role: (folder / role).read_text().strip() for role in ROLES if (folder / role).exists()}
    sys.stdout.write(acl_file(passwords, args.namespace))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
