"""Render charts/edgetune with the real Helm engine (helm-python-sdk, Helm v4 in-process).

    python tests/deployment/chart_render.py                       # default values, to stdout
    python tests/deployment/chart_render.py deploy/values-examples/kuberay.yaml
    python tests/deployment/chart_render.py default --api-versions ray.io/v1

The output is what ``helm template edgetune charts/edgetune -n edgetune`` prints (NOTES.txt
left out), for checkov, kubeconform or a reader.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "edgetune"
EXAMPLES = ROOT / "deploy" / "values-examples"
RELEASE = "edgetune"
NAMESPACE = "edgetune"
# libyaml's safe loader when PyYAML has it (it parses a render ~10x faster than the pure-Python one)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def render(values: dict[str, Any] | None = None, *, api_versions: tuple[str, ...] = (),
           kube_version: str | None = None, name: str = RELEASE,
           namespace: str = NAMESPACE) -> dict[str, str]:
    """Template path -> rendered text. ``api_versions`` / ``kube_version`` set Helm's
    ``.Capabilities`` (as ``helm template --api-versions / --kube-version`` do); the SDK's
    Python wrapper does not expose them, its C ABI does."""
    import helm_python as helm
    from helm_python import _native

    opts: dict[str, Any] = {"name": name, "namespace": namespace, "is_install": True}
    if api_versions:
        opts["api_versions"] = list(api_versions)
    if kube_version:
        opts["kube_version"] = kube_version
    with helm.Chart.load(CHART) as chart:
        out = _native.call_string("helm_render", chart._raw(),
                                  None if values is None else json.dumps(values), json.dumps(opts))
    rendered: dict[str, str] = json.loads(out)
    return rendered


def manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object in a render (NOTES.txt and empty documents dropped)."""
    objs: list[dict[str, Any]] = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        objs.extend(d for d in yaml.load_all(text, Loader=SAFE_LOADER) if d)
    return objs


def to_yaml(rendered: dict[str, str]) -> str:
    parts = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt") or not text.strip():
            continue
        parts.append(f"---\n# Source: {path}\n{text.strip()}\n")
    return "".join(parts)


def load_values(arg: str) -> dict[str, Any] | None:
    if arg in ("", "-", "default"):
        return None
    path = Path(arg)
    if not path.exists() and (EXAMPLES / arg).exists():
        path = EXAMPLES / arg
    data = yaml.safe_load(path.read_text())
    return data or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("values", nargs="?", default="default", help="values file, or 'default'")
    parser.add_argument("--api-versions", default="", help="comma-separated, e.g. ray.io/v1")
    parser.add_argument("--kube-version", default=None, help="e.g. v1.30.0")
    args = parser.parse_args(argv)
    apis = tuple(a for a in args.api_versions.split(",") if a)
    sys.stdout.write(to_yaml(render(load_values(args.values), api_versions=apis,
                                    kube_version=args.kube_version)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
