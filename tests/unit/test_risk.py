"""Risk has one home (:mod:`edgetune.base.risk`): its rule (:func:`validation.risk`), its z and the
upper bound ``mean + z·std``. The behaviour is tested here; the source test holds every other module
to it (no normal quantile computed, no z typed in, no ``mean + z * std`` written elsewhere)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from edgetune import validation
from edgetune.base.risk import upper_bound, z_score
from edgetune.errors import InvalidArgument
from edgetune.tuning.policy import TuningPolicy

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "libs" / "edgetune" / "base" / "risk.py"
#: Functions that compute a normal quantile (scipy, statistics, numpy-free spellings).
QUANTILE_FUNCTIONS = {"ndtri", "ppf", "isf", "inv_cdf", "erfinv", "erfcinv"}
#: z of the usual risks: typed in as a literal, it is z computed by hand.
TYPED_IN_Z = [z_score(r) for r in (0.005, 0.01, 0.025, 0.05)]


def test_z_is_the_one_sided_normal_quantile():
    assert z_score(0.05) == pytest.approx(1.6448536269514722)
    assert z_score(0.025) == pytest.approx(1.959963984540054)
    assert z_score(0.5) == 0.0
    assert z_score(0.01) > z_score(0.05) > z_score(0.2)  # less risk, wider margin


@pytest.mark.parametrize("risk", [0, 0.0, -0.1, 0.51, 1.0, math.nan, math.inf, True, "0.05", None])
def test_a_risk_outside_the_rule_is_refused_naming_it(risk):
    with pytest.raises(InvalidArgument) as err:
        z_score(risk)
    assert err.value.field == "risk" and err.value.allowed == validation.RISK_ALLOWED


def test_the_bound_is_mean_plus_z_std_per_option():
    mean, std = np.array([10.0, 20.0, 30.0]), np.array([0.0, 1.0, 2.0])
    np.testing.assert_allclose(upper_bound(mean, std, 0.05), mean + 1.6448536269514722 * std)
    np.testing.assert_array_equal(upper_bound(mean, std, 0.5), mean)  # risk 0.5: the mean itself


def test_the_tuning_policy_checks_its_risk_by_the_one_rule():
    with pytest.raises(InvalidArgument) as err:
        TuningPolicy(risk=0.9)
    assert err.value.field == "risk" and err.value.allowed == validation.RISK_ALLOWED
    assert TuningPolicy(risk=0.05).z == z_score(0.05)


def _sources() -> list[Path]:
    return [p for top in ("libs", "services") for p in sorted((ROOT / top).rglob("*.py"))
            if "proto/v1" not in p.as_posix() and p != HOME]


def _is_z(node: ast.AST) -> bool:
    """A z: a name or attribute ``z`` (``self.policy.z``) or a call of ``z_score``."""
    if isinstance(node, ast.Name):
        return node.id == "z"
    if isinstance(node, ast.Attribute):
        return node.attr == "z"
    return isinstance(node, ast.Call) and _is_z_score(node.func)


def _is_z_score(func: ast.AST) -> bool:
    return (isinstance(func, ast.Name) and func.id == "z_score") or (
        isinstance(func, ast.Attribute) and func.attr == "z_score")


def _offences(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in QUANTILE_FUNCTIONS:
            found.append(f"{node.lineno}: computes a normal quantile ({name})")
        if isinstance(node, ast.Constant) and isinstance(node.value, float) and any(
                abs(node.value - z) < 1e-3 for z in TYPED_IN_Z):
            found.append(f"{node.lineno}: a z typed in ({node.value!r})")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for side in (node.left, node.right):
                if isinstance(side, ast.BinOp) and isinstance(side.op, ast.Mult) and (
                        _is_z(side.left) or _is_z(side.right)):
                    found.append(f"{node.lineno}: writes mean + z * std (base.risk.upper_bound)")
    return found


def test_no_other_module_computes_z_or_the_bound():
    offences = [f"{p.relative_to(ROOT)}:{o}" for p in _sources() for o in _offences(p)]
    assert offences == []


def test_the_source_check_catches_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from scipy.stats import norm\nz = norm.ppf(0.95)\nZ = 1.6449\n"
                   "bound = power_w + policy.z * std\nother = mean + z_score(0.05) * std\n")
    assert len(_offences(bad)) == 4
