"""The Predictor interface: fit / transfer / predict one target over power-mode features.

A :class:`Predictor` learns one target (``time_ms`` or ``power_w``) from an ``(n, d)`` feature
array (columns: :mod:`edgetune.estimation.features`). The base class owns everything the
methods share — input checks, feature standardisation, the target transform (log for time)
and its standardisation, the trained feature ranges, training metadata and the file format —
so a method only implements ``_fit`` / ``_predict`` (and ``_transfer`` when it can adapt a
fitted model to a new small table) on standardised arrays.

``predict`` returns ``(mean, std)`` in the target's units; ``std`` is ``None`` for methods
without uncertainty.

File format (``to_bytes`` / ``from_bytes``): a zip with ``header.json`` (format name, version,
method, target, transform, feature columns, both scalers, ranges, constructor parameters,
metadata, method state), ``arrays.npz`` (numeric state, read with ``allow_pickle=False``) and
``blobs/*`` (opaque bytes; only the random forest uses one — a pickle, so load forest
models only from sources you trust, as with any pickle). Unknown formats or versions are
refused with :class:`InvalidArgument`.
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from edgetune.base.mode import MODE_FIELDS
from edgetune.errors import FailedPrecondition, InvalidArgument
from edgetune.estimation.features import (
    BATCH_FEATURE,
    DEFAULT_TRANSFORM,
    TARGETS,
    TRANSFORMS,
    Standardizer,
    forward_transform,
    inverse_transform,
)
from edgetune.estimation.validation import (
    MIN_FIT_ROWS,
    MIN_TRANSFER_ROWS,
    check_range,
    check_xy,
    merge_ranges,
)

PREDICTOR_FORMAT = "edgetune-predictor"
PREDICTOR_VERSION = 1
SUPPORTED_PREDICTOR_VERSIONS = (1,)

#: method name → class, filled by subclasses (``method = "..."`` class attribute).
_CLASSES: dict[str, type[Predictor]] = {}


class Predictor(ABC):
    """One target over power-mode features; see the module docs."""

    method: ClassVar[str] = ""
    #: Whether :meth:`transfer` adapts a fitted model (else it raises FailedPrecondition).
    supports_transfer: ClassVar[bool] = False
    #: Whether :meth:`predict` returns a std.
    gives_std: ClassVar[bool] = False

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.method:
            _CLASSES[cls.method] = cls

    def __init__(self, target: str = "time_ms", transform: str | None = None, seed: int = 0) -> None:
        if target not in TARGETS:
            raise InvalidArgument("target", f"unknown target {target!r}", ", ".join(TARGETS))
        transform = transform or DEFAULT_TRANSFORM[target]
        if transform not in TRANSFORMS:
            raise InvalidArgument("target_transform", f"unknown transform {transform!r}", ", ".join(TRANSFORMS))
        self.target = target
        self.transform = transform
        self.seed = int(seed)
        self.columns: tuple[str, ...] = ()
        self.x_scaler: Standardizer | None = None
        self.y_scaler: Standardizer | None = None
        self.lo: np.ndarray | None = None
        self.hi: np.ndarray | None = None
        self.meta: dict[str, Any] = {"fit": None, "transfers": []}

    # -- what subclasses implement -------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        """Constructor keyword arguments besides target / transform / seed (JSON-able)."""
        return {}

    @abstractmethod
    def _fit(self, xs: np.ndarray, ys: np.ndarray) -> dict[str, Any]:
        """Learn from standardised features and targets; return metadata to record."""

    @abstractmethod
    def _predict(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Mean (and std or None) in standardised target space."""

    def _transfer(self, xs: np.ndarray, ys: np.ndarray) -> dict[str, Any]:
        raise FailedPrecondition(f"method {self.method!r} cannot transfer a fitted model; fit it on the new "
                                 f"table instead (methods that transfer: transfer, nn, nn-asym, nn+gp)")

    @classmethod
    def _transfer_many(cls, preds: Sequence[Predictor], xss: Sequence[np.ndarray],
                       yss: Sequence[np.ndarray]) -> list[dict[str, Any]]:
        """``_transfer`` of every predictor on its own rows; a method whose work batches (the MLP's
        fine-tuning) overrides this so that many transfers share one pass, each result the same as alone."""
        return [p._transfer(xs, ys) for p, xs, ys in zip(preds, xss, yss, strict=True)]

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, bytes]]:
        """(JSON state, numeric arrays, opaque blobs) that :meth:`_load_state` restores."""
        return {}, {}, {}

    def _load_state(self, state: dict[str, Any], arrays: dict[str, np.ndarray],  # noqa: B027 (optional hook)
                    blobs: dict[str, bytes]) -> None:
        """Restore what :meth:`_state` saved (nothing, by default)."""

    # -- public API ----------------------------------------------------------------------------
    @property
    def fitted(self) -> bool:
        return self.x_scaler is not None

    def _fitted_parts(self) -> tuple[Standardizer, Standardizer, np.ndarray, np.ndarray]:
        """(x scaler, y scaler, feature lows, feature highs) of a fitted predictor."""
        if self.x_scaler is None or self.y_scaler is None or self.lo is None or self.hi is None:
            raise FailedPrecondition(f"{self.method} predictor is not fitted")
        return self.x_scaler, self.y_scaler, self.lo, self.hi

    def fit(self, x: np.ndarray, y: np.ndarray, columns: Sequence[str] | None = None) -> Predictor:
        """Learn ``y`` (target units) from features ``x`` (columns as named; default the mode columns)."""
        columns = tuple(columns) if columns is not None else default_columns(np.shape(x))
        x, y = check_xy(x, y, columns, min_rows=MIN_FIT_ROWS, what=f"fitting {self.method}", target=self.target)
        z = forward_transform(self.transform, y)
        self.columns = columns
        self.x_scaler = x_scaler = Standardizer.fit(x)
        self.y_scaler = y_scaler = Standardizer.fit(z)
        self.lo, self.hi = merge_ranges(None, None, x)
        t0 = time.perf_counter()
        info = self._fit(x_scaler.transform(x), y_scaler.transform(z).ravel())
        self.meta["fit"] = {"rows": int(x.shape[0]), "seconds": round(time.perf_counter() - t0, 3), **info}
        self.meta["transfers"] = []
        return self

    def transfer(self, x: np.ndarray, y: np.ndarray) -> Predictor:
        """Adapt this fitted model to a new workload / device from a small table, in place.

        The feature scaling of the first fit is kept (the learned layers expect it); the
        target scaling is re-estimated on the new table. Clone first (:meth:`clone`) to keep
        the reference.
        """
        transfer_many([self], [x], [y])
        return self

    def predict(self, x: np.ndarray, check_ranges: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """Prediction and std (or ``None``) in target units for features ``x``."""
        if not self.fitted:
            raise FailedPrecondition(f"{self.method} predictor is not fitted")
        x_scaler, y_scaler, lo, hi = self._fitted_parts()
        x, _ = check_xy(x, None, self.columns, min_rows=1, what="predicting")
        if check_ranges:
            check_range(x, lo, hi, self.columns)
        mu_s, sd_s = self._predict(x_scaler.transform(x))
        mu = y_scaler.inverse(np.asarray(mu_s).reshape(-1, 1)).ravel()
        sd = None if sd_s is None else np.asarray(sd_s).ravel() * float(y_scaler.std[0])
        return inverse_transform(self.transform, mu, sd)

    def clone(self) -> Predictor:
        """An independent copy (through the file format, so it is exactly what a reload gives)."""
        return Predictor.from_bytes(self.to_bytes())

    # -- file format ---------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        if not self.fitted:
            raise FailedPrecondition(f"{self.method} predictor is not fitted; nothing to save")
        x_scaler, y_scaler, lo, hi = self._fitted_parts()
        state, arrays, blobs = self._state()
        header = {
            "format": PREDICTOR_FORMAT, "version": PREDICTOR_VERSION, "method": self.method,
            "target": self.target, "transform": self.transform, "seed": self.seed, "params": self.params(),
            "columns": list(self.columns), "x_scaler": x_scaler.to_dict(),
            "y_scaler": y_scaler.to_dict(),
            "ranges": {"lo": [float(v) for v in lo], "hi": [float(v) for v in hi]},
            "meta": self.meta, "state": state,
        }
        buf = io.BytesIO()
        # stored, not deflated: float weights shrink ~9 % for ~4x the CPU of writing the file, which a
        # transfer does several times per node (worker -> estimator -> model store)
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
            zf.writestr("header.json", json.dumps(header, indent=1))
            npz = io.BytesIO()
            # numpy's stub types **kwds against savez's own keywords (allow_pickle: bool)
            np.savez(npz, **{k: np.asarray(v) for k, v in arrays.items()})  # type: ignore[arg-type]
            zf.writestr("arrays.npz", npz.getvalue())
            for name, blob in blobs.items():
                zf.writestr(f"blobs/{name}", blob)
        return buf.getvalue()

    @staticmethod
    def from_bytes(data: bytes, source: str = "predictor") -> Predictor:
        """Rebuild a predictor written by :meth:`to_bytes` (any registered method)."""
        import edgetune.estimation.registry  # noqa: F401  (registers every method class)

        try:
            zf = zipfile.ZipFile(io.BytesIO(data))
            header = json.loads(zf.read("header.json"))
        except (zipfile.BadZipFile, KeyError, ValueError) as exc:
            raise InvalidArgument(source, f"not an edgetune predictor ({exc})") from None
        check_header(header, PREDICTOR_FORMAT, SUPPORTED_PREDICTOR_VERSIONS, source)
        cls = _CLASSES.get(header.get("method", ""))
        if cls is None:
            raise InvalidArgument(f"{source}:method", f"unknown method {header.get('method')!r}",
                                  ", ".join(sorted(_CLASSES)))
        pred = cls(target=header["target"], transform=header["transform"], seed=header["seed"], **header["params"])
        pred.columns = tuple(header["columns"])
        pred.x_scaler = Standardizer.from_dict(header["x_scaler"])
        pred.y_scaler = Standardizer.from_dict(header["y_scaler"])
        pred.lo = np.asarray(header["ranges"]["lo"], dtype=float)
        pred.hi = np.asarray(header["ranges"]["hi"], dtype=float)
        pred.meta = header["meta"]
        with np.load(io.BytesIO(zf.read("arrays.npz")), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        blobs = {n[len("blobs/"):]: zf.read(n) for n in zf.namelist() if n.startswith("blobs/")}
        pred._load_state(header["state"], arrays, blobs)
        return pred

    def __repr__(self) -> str:
        state = f"fitted on {self.columns}" if self.fitted else "unfitted"
        return f"<{type(self).__name__} {self.method} {self.target} {state}>"


def default_columns(shape: tuple[int, ...]) -> tuple[str, ...]:
    """Mode columns for 4-wide features, plus batch_size for 5-wide ones."""
    width = shape[1] if len(shape) == 2 else -1
    if width == 4:
        return MODE_FIELDS
    if width == 5:
        return (*MODE_FIELDS, BATCH_FEATURE)
    raise InvalidArgument("features", f"expected 4 or 5 feature columns, got shape {tuple(shape)}",
                          ",".join((*MODE_FIELDS, BATCH_FEATURE)))


def check_header(header: Any, fmt: str, versions: Sequence[int], source: str) -> None:
    """Refuse a file of another format or of a version this code does not read."""
    if not isinstance(header, dict) or header.get("format") != fmt:
        got = header.get("format") if isinstance(header, dict) else None
        raise InvalidArgument(source, f"not an {fmt} file (format {got!r})", fmt)
    if header.get("version") not in versions:
        raise InvalidArgument(f"{source}:version", f"unknown {fmt} version {header.get('version')!r}; "
                              f"written by a newer edgetune?", ", ".join(str(v) for v in versions))


def transfer_many(preds: Sequence[Predictor], xs: Sequence[np.ndarray], ys: Sequence[np.ndarray]) -> None:
    """:meth:`Predictor.transfer` of each predictor to its own table, in place; predictors of one class
    transfer together (:meth:`Predictor._transfer_many`), each ending as it would alone."""
    prepared: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (x, standardised x, standardised y)
    for p, x, y in zip(preds, xs, ys, strict=True):
        if not p.supports_transfer:
            p._transfer(x, y)  # raises with the reason
        if not p.fitted:
            raise FailedPrecondition(f"{p.method} predictor is not fitted; fit a reference before transferring")
        x, y = check_xy(x, y, p.columns, min_rows=MIN_TRANSFER_ROWS, what=f"transferring {p.method}",
                        target=p.target)
        x_scaler = p._fitted_parts()[0]
        z = forward_transform(p.transform, y)
        p.y_scaler = y_scaler = Standardizer.fit(z)
        prepared.append((x, x_scaler.transform(x), y_scaler.transform(z).ravel()))
    by_class: dict[type[Predictor], list[int]] = {}
    for i, p in enumerate(preds):
        by_class.setdefault(type(p), []).append(i)
    t0 = time.perf_counter()
    infos: dict[int, dict[str, Any]] = {}
    for cls, idx in by_class.items():
        done = cls._transfer_many([preds[i] for i in idx], [prepared[i][1] for i in idx], [prepared[i][2] for i in idx])
        infos.update(zip(idx, done, strict=True))
    seconds = round((time.perf_counter() - t0) / max(len(preds), 1), 3)  # a batch's time, per transfer
    for i, p in enumerate(preds):
        _, _, lo, hi = p._fitted_parts()
        x = prepared[i][0]
        p.lo, p.hi = merge_ranges(lo, hi, x)
        p.meta["transfers"].append({"rows": int(x.shape[0]), "seconds": seconds, **infos[i]})
