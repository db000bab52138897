"""TimePowerModel: the time and power predictors of one (device, workload, role), in one file.

This is what ``edgetune estimate fit`` writes and ``transfer`` / ``predict`` read. It holds one
:class:`~edgetune.estimation.base.Predictor` per target (``time_ms``, ``power_w``) plus what
they were learned from: device, workload, role, batch sizes, feature columns, and a history
of fits and transfers.

File: a zip with ``header.json`` (format ``edgetune-model``, version, metadata, member names)
and one member per target holding that predictor's own file (feature scaling, target
transform, method, format version and training metadata inside; ``base.py``). Files of an
unknown format or version are refused with :class:`InvalidArgument`.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import time
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgetune import __version__
from edgetune.base.risk import z_score
from edgetune.errors import InvalidArgument
from edgetune.estimation.base import Predictor, check_header
from edgetune.estimation.devices import check_modes_device, model_devices
from edgetune.estimation.features import BATCH_FEATURE, STD_COLUMNS, TARGETS, feature_columns, table_features
from edgetune.estimation.metrics import mape_pct
from edgetune.estimation.references import PREFIX, REFERENCES, reference_path
from edgetune.estimation.registry import adapt_many, make_predictor
from edgetune.tables import Table

#: Folds of the cross-validation ``estimate fit`` / ``transfer`` run by default.
CV_FOLDS = 5
#: z of the two-sided 90 % interval whose coverage the cross-validation reports (5 % above, 5 % below).
Z90 = z_score(0.05)

MODEL_FORMAT = "edgetune-model"
MODEL_VERSION = 1
SUPPORTED_MODEL_VERSIONS = (1,)
#: Optional table columns that name what a model is about; a table may hold only one value of each.
IDENTITY_COLUMNS = ("device", "workload", "role")

ProgressFn = Callable[[str, int, int], None]
#: Runs ``fn(**shared, **task)`` for every task and returns the results in order: :func:`run_in_order`,
#: or the estimator's Ray runner (:class:`edgetune.estimation.jobs.Runner`).
TaskRunner = Callable[[Callable[..., Any], Sequence[Mapping[str, Any]], Mapping[str, Any] | None], list[Any]]


@dataclass
class TimePowerModel:
    """Time and power predictors with their provenance (see the module docs)."""

    predictors: dict[str, Predictor]
    device: str = ""
    workload: str = ""
    role: str = ""
    batch_sizes: list[int] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)

    # -- construction: the one fit / transfer pipeline ---------------------------------------------
    @classmethod
    def fit_table(cls, table: Table, method: str = "nn", seed: int = 0, progress: ProgressFn | None = None, *,
                  runner: TaskRunner | None = None, validation_fraction: float = 0.0, source: str | None = None,
                  cv_folds: int = 0, **kw: Any) -> TimePowerModel:
        """Fit both targets of a (large, reference) profile table with ``method``, one task per target.

        ``validation_fraction`` > 0 holds that fraction of the rows out (seeded) and records each
        target's MAPE on them in the fit's history event. ``runner`` runs the per-target tasks
        (:data:`TaskRunner`; default: in order, in this process — the estimator service passes
        its Ray runner); ``progress`` reaches the predictors only in this process. ``cv_folds`` ≥ 2
        also cross-validates the method on the table (:func:`cross_validate`, in this process) and
        records it in the event (``cv`` and the ``*_cv`` metrics).
        """
        ident = _identity(table)
        columns = feature_columns(table)
        x = table_features(table, columns)
        train, held = split(len(table), validation_fraction, seed) if validation_fraction > 0 else (
            np.arange(len(table)), np.arange(0))
        tasks = [{"y": table.column(t)[train], "target": t, "kw": _for_target(kw, t)} for t in TARGETS]
        shared: dict[str, Any] = {"x": x[train], "columns": columns, "method": method, "seed": seed}
        if progress is not None:
            shared["progress"] = progress
        files = (runner or run_in_order)(fit_target, tasks, shared)
        predictors = {t: Predictor.from_bytes(f) for t, f in zip(TARGETS, files, strict=True)}
        model = cls(predictors, ident.get("device", ""), ident.get("workload", ""), ident.get("role", ""),
                    _batch_sizes(table))
        event = _event("fit", method, table, ident, len(train), source)
        if len(held):
            pred = model.predict(x[held])
            event.update(metrics={f"{t.split('_')[0]}_mape": mape_pct(pred[t], table.column(t)[held])
                                  for t in TARGETS},
                         held_out_rows=len(held), validation_fraction=validation_fraction, seed=seed)
        if cv_folds:
            def refit(xts: Sequence[np.ndarray], yts: Sequence[np.ndarray], target: str) -> list[Predictor]:
                return [Predictor.from_bytes(fit_target(x=xt, y=yt, columns=columns, method=method, target=target,
                                                        seed=seed, kw=_for_target(kw, target)))
                        for xt, yt in zip(xts, yts, strict=True)]
            _record_cv(event, cross_validate(x, {t: table.column(t) for t in TARGETS}, refit, cv_folds, seed))
        model.history.append(event)
        return model

    def transfer_table(self, table: Table, method: str = "ref+gp", progress: ProgressFn | None = None, *,
                       runner: TaskRunner | None = None, nn_settings: Mapping[str, Any] | None = None,
                       source: str | None = None, cv_folds: int = 0, **kw: Any) -> TimePowerModel:
        """A new model for ``table`` (a small profile table of a new workload or device); self is kept.

        ``nn_settings`` (``transfer_epochs``, ``transfer_lr``, ``transfer_mode``, ``seed``) configure
        the fine-tuning of the reference MLP (the only place they are set); ``kw`` go to
        :func:`~edgetune.estimation.registry.adapt` (per target as in :meth:`fit_table`). The
        history event records the in-sample MAPE and, with ``cv_folds`` ≥ 2, the K-fold
        cross-validated accuracy of the whole transfer (the reference adapted on the other folds).
        """
        model = self.transfer_tables([table], method, progress, runner=runner, nn_settings=nn_settings,
                                     sources=[source], **kw)[0]
        if cv_folds:
            x = table_features(table, self.columns)

            def refit(xts: Sequence[np.ndarray], yts: Sequence[np.ndarray], target: str) -> list[Predictor]:
                # every fold's transfer in one batch: the MLP methods fine-tune the K nets as one stack, each
                # the same as alone (transfer_many), for about the cost of one
                return [Predictor.from_bytes(f) for f in transfer_targets(
                    bases=[self.predictors[target].to_bytes()], which=[0] * len(xts), xs=xts, ys=yts, method=method,
                    kw=_for_target(kw, target), nn_settings=dict(nn_settings or {}))]
            _record_cv(model.history[-1], cross_validate(x, {t: table.column(t) for t in TARGETS}, refit, cv_folds, 0))
        return model

    def transfer_tables(self, tables: Sequence[Table], method: str = "ref+gp", progress: ProgressFn | None = None,
                        *, runner: TaskRunner | None = None, nn_settings: Mapping[str, Any] | None = None,
                        sources: Sequence[str | None] | None = None, chunks: int = 1,
                        **kw: Any) -> list[TimePowerModel]:
        """:meth:`transfer_table` of each table (without cross-validation): :func:`transfer_tables` from this
        reference alone."""
        return transfer_tables([self] * len(tables), tables, method, progress, runner=runner, nn_settings=nn_settings,
                               sources=sources, chunks=chunks, **kw)

    @property
    def cross_validation(self) -> CrossValidation | None:
        """The cross-validated accuracy of the fit or transfer that made this model, if it ran one."""
        cv = self.last_event.get("cv")
        return CrossValidation.from_dict(cv) if cv else None

    @property
    def last_event(self) -> dict[str, Any]:
        """The history event of the fit or transfer that made this model."""
        return self.history[-1] if self.history else {}

    # -- prediction ----------------------------------------------------------------------------
    @property
    def columns(self) -> tuple[str, ...]:
        return self.predictors["time_ms"].columns

    @property
    def gives_std(self) -> bool:
        return any(p.gives_std for p in self.predictors.values())

    def features(self, table: Table) -> np.ndarray:
        """The model's feature array for a mode table; checks batch sizes against the model's."""
        if BATCH_FEATURE not in self.columns and table.has(BATCH_FEATURE) and self.batch_sizes:
            for line, row in enumerate(table.rows, start=2):
                if row[BATCH_FEATURE] not in self.batch_sizes:
                    raise InvalidArgument(f"{table.path or 'modes'}:{line}:{BATCH_FEATURE}",
                                          f"the model was fitted for batch size {_fmt(self.batch_sizes)} only, "
                                          f"not {row[BATCH_FEATURE]}", _fmt(self.batch_sizes))
        return table_features(table, self.columns)

    def predict(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """``{"time_ms", "power_w"}`` and, where a predictor has uncertainty, ``time_std_ms`` / ``power_std_w``."""
        out: dict[str, np.ndarray] = {}
        for target in TARGETS:
            mean, std = self.predictors[target].predict(x)
            out[target] = mean
            if std is not None:
                out[STD_COLUMNS[target]] = std
        return out

    def predict_table(self, table: Table) -> dict[str, np.ndarray]:
        """Predictions for a mode table; modes of a device the model does not know are refused (``devices.py``)."""
        x = self.features(table)
        out = self.predict(x)  # first: its range check names a wrong unit (kHz for MHz) as such
        named = {str(r["device"]) for r in table.rows} if table.has("device") else set()
        check_modes_device(model_devices(self.device, self.history), x, self.columns, named, table.path or "modes")
        return out

    # -- file format ---------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        members = {t: f"{t}.predictor" for t in self.predictors}
        header: dict[str, Any] = {
            "format": MODEL_FORMAT, "version": MODEL_VERSION, "edgetune": __version__,
            "device": self.device, "workload": self.workload, "role": self.role,
            "batch_sizes": list(self.batch_sizes), "columns": list(self.columns),
            "methods": {t: p.method for t, p in self.predictors.items()},
            "members": members,
            "history": self.history,
        }
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:  # members are zips already
            zf.writestr("header.json", json.dumps(header, indent=1))
            for target, pred in self.predictors.items():
                zf.writestr(members[target], pred.to_bytes())
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "model") -> TimePowerModel:
        try:
            zf = zipfile.ZipFile(io.BytesIO(data))
            header = json.loads(zf.read("header.json"))
        except (zipfile.BadZipFile, KeyError, ValueError):
            raise InvalidArgument(source, "not an edgetune model file (expected what `edgetune estimate fit` "
                                          "writes)") from None
        check_header(header, MODEL_FORMAT, SUPPORTED_MODEL_VERSIONS, source)
        predictors = {}
        for target in TARGETS:
            member = header.get("members", {}).get(target)
            if member is None or member not in zf.namelist():
                raise InvalidArgument(f"{source}:{target}", "the model file has no predictor for this target")
            predictors[target] = Predictor.from_bytes(zf.read(member), f"{source}:{member}")
        return cls(predictors, header.get("device", ""), header.get("workload", ""), header.get("role", ""),
                   list(header.get("batch_sizes", [])), list(header.get("history", [])))

    def save(self, path: str | os.PathLike[str]) -> None:
        parent = os.path.dirname(os.fspath(path))
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(self.to_bytes())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TimePowerModel:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            raise InvalidArgument(os.fspath(path), "no such file") from None
        except IsADirectoryError:
            raise InvalidArgument(os.fspath(path), "is a directory, not a model file") from None
        return cls.from_bytes(data, os.fspath(path))

    def describe(self) -> str:
        what = "/".join(v for v in (self.device, self.workload, self.role) if v) or "unnamed"
        methods = ", ".join(f"{t}: {p.method}" for t, p in self.predictors.items())
        return f"{what} ({methods}; features {','.join(self.columns)})"


def load_reference(name: str) -> TimePowerModel:
    """A shipped reference model (:mod:`edgetune.estimation.references` names them), loaded."""
    return TimePowerModel.load(reference_path(name))


def load_base(name_or_path: str, field: str = "--base") -> TimePowerModel:
    """The model a transfer starts from: a shipped reference (``reference:NAME``) or a model file; a bad
    one is InvalidArgument naming ``field`` (the same rule for ``estimate transfer`` and ``tune``)."""
    try:
        if name_or_path.startswith(PREFIX):
            return TimePowerModel.load(reference_path(name_or_path, field))
        return TimePowerModel.load(name_or_path)
    except InvalidArgument as exc:
        if exc.field == field:
            raise
        raise InvalidArgument(field, exc.message if exc.field == name_or_path else str(exc),
                              exc.allowed or f"a model file (edgetune estimate fit) or "
                              f"{', '.join(PREFIX + r.device for r in REFERENCES)}") from None


# -- helpers -----------------------------------------------------------------------------------
def _identity(table: Table) -> dict[str, str]:
    """device / workload / role of a table (each column optional, but single-valued when present)."""
    out: dict[str, str] = {}
    for col in IDENTITY_COLUMNS:
        if table.has(col):
            values = sorted({str(r[col]) for r in table.rows if str(r[col])})
            if len(values) > 1:
                raise InvalidArgument(f"{table.path or 'table'}:{col}",
                                      f"the table mixes {len(values)} values ({', '.join(values[:4])}); "
                                      f"a model is per device, workload and role — split the table",
                                      "one value")
            if values:
                out[col] = values[0]
    return out


def _batch_sizes(table: Table) -> list[int]:
    if not table.has(BATCH_FEATURE):
        return []
    return sorted({int(r[BATCH_FEATURE]) for r in table.rows})


def _fmt(sizes: list[int]) -> str:
    return ", ".join(str(s) for s in sizes) or "unknown"


@dataclass(frozen=True)
class CrossValidation:
    """K-fold cross-validated accuracy of a fit or transfer: every row predicted by the method
    refitted without its fold. Coverage: the share of rows inside their 90 % interval
    (μ ± 1.645 σ), a fraction; None for a method without uncertainty."""

    folds: int
    rows: int
    time_mape_pct: float
    power_mape_pct: float
    time_coverage: float | None = None
    power_coverage: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"folds": self.folds, "rows": self.rows, "time_mape_pct": self.time_mape_pct,
                "power_mape_pct": self.power_mape_pct, "time_coverage": self.time_coverage,
                "power_coverage": self.power_coverage}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CrossValidation:
        def opt(v: Any) -> float | None:
            return None if v is None else float(v)
        return cls(int(d["folds"]), int(d["rows"]), float(d["time_mape_pct"]), float(d["power_mape_pct"]),
                   opt(d.get("time_coverage")), opt(d.get("power_coverage")))

    def describe(self) -> str:
        cov = ""
        if self.time_coverage is not None and self.power_coverage is not None:
            cov = (f"; 90 % interval covers {100 * self.time_coverage:.0f} % (time), "
                   f"{100 * self.power_coverage:.0f} % (power)")
        return (f"{self.folds}-fold cross-validated on {self.rows} rows: MAPE time {self.time_mape_pct:.1f} %, "
                f"power {self.power_mape_pct:.1f} %{cov}")


def cross_validate(x: np.ndarray, ys: Mapping[str, np.ndarray],
                   refit: Callable[[Sequence[np.ndarray], Sequence[np.ndarray], str], Sequence[Predictor]],
                   folds: int, seed: int) -> CrossValidation | None:
    """K-fold CV of ``refit`` over the rows of ``x``; None when there are too few rows for two folds of two.

    ``refit(xs, ys, target)`` fits one predictor per fold's training rows, all folds in one call (so a
    method that batches its fits, as the MLP transfers do, fits them together)."""
    n = len(x)
    k = min(int(folds), n // 2)
    if k < 2:
        return None
    parts = np.array_split(np.random.default_rng(seed).permutation(n), k)
    mape: dict[str, float] = {}
    coverage: dict[str, float | None] = {}
    rests = [np.setdiff1d(np.arange(n), part) for part in parts]
    for target, y in ys.items():
        mean, std = np.empty(n), np.full(n, np.nan)
        with warnings.catch_warnings():  # a fold may reach outside the others' ranges: that is the test
            warnings.simplefilter("ignore")
            fitted = refit([x[rest] for rest in rests], [y[rest] for rest in rests], target)
            predicted = [p.predict(x[part], check_ranges=False) for p, part in zip(fitted, parts, strict=True)]
        for part, (m, sd) in zip(parts, predicted, strict=True):
            mean[part] = m
            if sd is not None:
                std[part] = sd
        mape[target] = mape_pct(mean, y)
        coverage[target] = (None if np.isnan(std).any()
                            else float(np.mean(np.abs(y - mean) <= Z90 * std)))
    return CrossValidation(k, n, mape["time_ms"], mape["power_w"], coverage["time_ms"], coverage["power_w"])


def _record_cv(event: dict[str, Any], cv: CrossValidation | None) -> None:
    """The cross-validation in a history event: the record, and its numbers among the metrics."""
    if cv is None:
        return
    event["cv"] = cv.to_dict()
    metrics = event.setdefault("metrics", {})
    metrics.update(time_mape_cv=cv.time_mape_pct, power_mape_cv=cv.power_mape_pct,
                   time_coverage_cv=cv.time_coverage, power_coverage_cv=cv.power_coverage)


def _for_target(kw: dict[str, Any], target: str) -> dict[str, Any]:
    """Keyword arguments for one target: ``{"power_w": {...}}`` entries apply to that target only."""
    common = {k: v for k, v in kw.items() if k not in TARGETS}
    return {**common, **kw.get(target, {})}


def _event(kind: str, method: str, table: Table, ident: dict[str, str], n_train: int,
           source: str | None) -> dict[str, Any]:
    return {"event": kind, "method": method, "rows": len(table), "n_train": n_train,
            "source": source if source is not None else os.path.basename(table.path or ""),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **ident}


def held_out_count(n: int, validation_fraction: float) -> int:
    """Rows a fit holds out: at least one."""
    return max(1, int(round(validation_fraction * n)))


def split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) row indices, each in table order; seeded."""
    perm = np.random.default_rng(seed).permutation(n)
    n_val = held_out_count(n, fraction)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def transfer_tables(bases: Sequence[TimePowerModel], tables: Sequence[Table], method: str = "ref+gp",
                    progress: ProgressFn | None = None, *, runner: TaskRunner | None = None,
                    nn_settings: Mapping[str, Any] | None = None, sources: Sequence[str | None] | None = None,
                    chunks: int = 1, **kw: Any) -> list[TimePowerModel]:
    """``bases[i].transfer_table(tables[i])`` for every i (without cross-validation), the tables split into
    ``chunks`` tasks per target: each task adapts its tables' references in one batch
    (:func:`~edgetune.estimation.registry.adapt_many`: nets from different references of one shape train together,
    so a fleet's refits from each node's own model batch as its transfers from one reference do), and ``chunks``
    tasks keep as many cores busy. Every model is the same whatever the split and the company (each adapted
    predictor is the same as adapted alone)."""
    xs = []
    for base, table in zip(bases, tables, strict=True):
        if BATCH_FEATURE not in base.columns and len(_batch_sizes(table)) > 1:
            raise InvalidArgument(
                "batch_size", f"{table.path or 'table'} has several batch sizes but the reference was fitted "
                              f"for one ({_fmt(base.batch_sizes)}); fit a reference on several batch sizes",
                "a single batch size")
        xs.append(table_features(table, base.columns))
    distinct = list({id(b): b for b in bases}.values())
    index = {id(b): j for j, b in enumerate(distinct)}
    parts = [p for p in np.array_split(np.arange(len(tables)), max(1, min(int(chunks), len(tables)))) if len(p)]
    tasks = []
    for t in TARGETS:
        files = [b.predictors[t].to_bytes() for b in distinct]
        for part in parts:
            used = sorted({index[id(bases[i])] for i in part})  # only the references its tables need
            tasks.append({"bases": [files[j] for j in used], "which": [used.index(index[id(bases[i])]) for i in part],
                          "xs": [xs[i] for i in part], "ys": [tables[i].column(t) for i in part],
                          "kw": _for_target(kw, t)})
    shared: dict[str, Any] = {"method": method, "nn_settings": dict(nn_settings or {})}
    if progress is not None:
        shared["progress"] = progress
    done = (runner or run_in_order)(transfer_targets, tasks, shared)
    files_of: dict[str, list[bytes]] = {t: [f for j in range(len(parts)) for f in done[ti * len(parts) + j]]
                                        for ti, t in enumerate(TARGETS)}
    models = []
    for i, (base, table) in enumerate(zip(bases, tables, strict=True)):
        ident = _identity(table)
        predictors = {t: Predictor.from_bytes(files_of[t][i]) for t in TARGETS}
        merged = {k: ident.get(k) or getattr(base, k) for k in IDENTITY_COLUMNS}
        model = TimePowerModel(predictors, batch_sizes=_batch_sizes(table) or list(base.batch_sizes),
                               history=list(base.history), **merged)
        pred = model.predict(xs[i])
        event = _event("transfer", method, table, ident, len(table), sources[i] if sources else None)
        event["metrics"] = {f"{t.split('_')[0]}_mape_train": mape_pct(pred[t], table.column(t)) for t in TARGETS}
        model.history.append(event)
        models.append(model)
    return models


# -- the per-target tasks (top-level: Ray workers import them by name) --------------------------
def fit_target(*, x: np.ndarray, y: np.ndarray, columns: tuple[str, ...], method: str, target: str, seed: int,
               kw: Mapping[str, Any], progress: ProgressFn | None = None) -> bytes:
    """One target's predictor fitted on (x, y), as its file."""
    pred = make_predictor(method, target, seed=seed, **kw)
    if progress is not None and hasattr(pred, "progress"):
        pred.progress = progress
    try:
        return pred.fit(x, y, columns=columns).to_bytes()
    finally:
        if hasattr(pred, "progress"):
            pred.progress = None


#: References decoded in this process (a worker keeps the few it is sent): sha256 of the file -> predictor.
_REFERENCES: dict[str, Predictor] = {}
_REFERENCES_KEPT = 8


def _reference(base: bytes) -> Predictor:
    """The reference predictor of a file, decoded once per process; callers get their own copy."""
    key = hashlib.sha256(base).hexdigest()
    ref = _REFERENCES.get(key)
    if ref is None:
        ref = Predictor.from_bytes(base)
        if len(_REFERENCES) >= _REFERENCES_KEPT:
            _REFERENCES.pop(next(iter(_REFERENCES)))
        _REFERENCES[key] = ref
    return copy.deepcopy(ref)


def transfer_targets(*, bases: Sequence[bytes], which: Sequence[int], xs: Sequence[np.ndarray],
                     ys: Sequence[np.ndarray], method: str, kw: Mapping[str, Any], nn_settings: Mapping[str, Any],
                     progress: ProgressFn | None = None) -> list[bytes]:
    """One target's reference predictors ``bases`` adapted to each table ``(xs[i], ys[i])`` (from
    ``bases[which[i]]``) with ``method``, in one batch (:func:`~edgetune.estimation.registry.adapt_many`), as files."""
    refs = [_reference(b) for b in bases]
    for ref in refs:
        nn = getattr(ref, "nn", ref)  # fine-tuning settings live on the reference MLP
        for key, value in nn_settings.items():
            if not hasattr(nn, key):
                raise InvalidArgument(f"nn_settings.{key}", f"not a fine-tuning setting of {ref.method!r}",
                                      "transfer_epochs, transfer_lr, transfer_mode, seed")
            setattr(nn, key, value)
    return [p.to_bytes() for p in adapt_many([refs[j] for j in which], method, xs, ys, progress=progress, **kw)]


def run_in_order(fn: Callable[..., Any], tasks: Sequence[Mapping[str, Any]],
                 shared: Mapping[str, Any] | None = None) -> list[Any]:
    """The default :data:`TaskRunner`: every task in this process, in order (errors raised as they are)."""
    return [fn(**(shared or {}), **task) for task in tasks]
