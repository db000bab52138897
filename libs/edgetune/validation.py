"""The input rules, in one place: budgets, rates, batch sizes, seeds, counts, risk, modes, ids.

Every layer (library, CLI, gRPC services) checks its inputs with these functions, so a value
means the same everywhere: a 0 W budget is refused by ``MinTime.select``, by
``edgetune optimize select --power-budget 0`` and by the optimizer's ``Select`` alike, with the
same message and the same ``allowed`` text. Each rule takes the value and the name of the
field it came from (a library argument ``power_budget_w``, a CLI option ``--power-budget``, a
request path ``budgets.power_budget_w``), returns the value in its canonical type, and raises
:class:`edgetune.errors.InvalidArgument` ``(field, message, allowed)`` otherwise.

Numbers are real numbers (``int``, ``float``, numpy scalars): ``True`` is not a number of
watts and ``"20"`` is not a number (parse text first, as :func:`budget_sweep` does). Counts
and batch sizes are integers: ``16.0`` is refused rather than silently truncated.

A caller that nests a value under a path (``modes[3]`` + ``gpu_mhz``) re-raises with
:meth:`InvalidArgument.prefixed`, never by parsing ``str(exc)``.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

from edgetune.errors import InvalidArgument

T = TypeVar("T")
M = TypeVar("M")


class ModeChecker(Protocol[M]):
    """What :func:`power_mode` needs of a device: ``DeviceSpec.validate`` (no import of the
    power-mode package here: validation is imported by the lightest modules)."""

    def validate(self, mode: M, /) -> M: ...

#: Largest batch size accepted anywhere (a minibatch of 64 Ki samples is already far beyond a Jetson).
MAX_BATCH_SIZE = 65_536
#: Seeds are what numpy's legacy and new generators both accept: 0 … 2**32 - 1.
MAX_SEED = 2**32 - 1
#: Fastest power sampling asked of a board (its INA3221 monitors update at ~1 kHz at best).
MAX_SAMPLE_RATE_HZ = 1_000.0
#: Slowest: one sample every 1,000 s.
MIN_SAMPLE_RATE_HZ = 0.001
#: Largest risk: beyond 0.5 the "upper" bound would sit below the mean.
MAX_RISK = 0.5
#: Longest identifier (node id, workload name, model id part, session id).
MAX_IDENTIFIER_LENGTH = 128
#: Longest sweep accepted from an ``A:B:STEP`` spec; guards against ``1:1e9:1e-9``.
MAX_SWEEP_POINTS = 100_000
#: Longest free text in a request (addresses, reasons, layer types, parameter values).
MAX_TEXT_LENGTH = 4096
#: Most items of one repeated field of a request (table columns; a 4 MiB message holds ~500k doubles).
MAX_REPEATED_ITEMS = 100_000
#: Most entries of one map field of a request (labels, params, per-node budgets).
MAX_MAP_ENTRIES = 1024
#: Most distinct batch sizes one request may list.
MAX_BATCH_SIZES = 64
#: Most minibatches measured per point (40 by default; 10k at ~100 ms each is already ~17 minutes).
MAX_MINIBATCHES = 10_000
#: Most points (modes x batch sizes) of one profile: the full Orin grid is ~18k modes.
MAX_PROFILE_POINTS = 20_000
#: Most layers of an EstimateEnergy network, and the largest size of any one of its dimensions.
MAX_LAYERS = 1_000
MAX_LAYER_DIM = 16_384
#: Most training epochs a request may ask for.
MAX_EPOCHS = 100_000
#: Longest value an error message quotes: a message echoing a 2 MiB value overflows gRPC's metadata.
MAX_SHOWN_CHARS = 80
#: Node ids name agents (Kubernetes node names, hostnames): letters, digits, ``. _ - :``.
NODE_ID_CHARS = "letters, digits, . _ - : (starting with a letter or digit)"
_NODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")

POWER_BUDGET_ALLOWED = "a finite number of watts > 0"
TIME_BUDGET_ALLOWED = "a finite number of milliseconds > 0"
ARRIVAL_RATE_ALLOWED = "a finite number of requests per second > 0"
BATCH_SIZE_ALLOWED = f"an integer from 1 to {MAX_BATCH_SIZE}"
SEED_ALLOWED = f"an integer from 0 to {MAX_SEED}"
RISK_ALLOWED = f"a probability with 0 < risk <= {MAX_RISK:g}"
SWEEP_ALLOWED = "W, or A:B[:STEP] with 0 < A <= B and STEP > 0 (default 1), e.g. 17:50:1"


# --------------------------------------------------------------------------- helpers


def shown(value: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """A value as the messages quote it: numbers with ``:g`` (0 and 0.0 read alike), others by
    repr, cut to ``limit`` characters (with how many were left out), so no message echoes 2 MiB."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return f"{float(value):g}"
    text = repr(value)
    if len(text) > limit:
        return f"{text[:limit]}… ({len(text) - limit} more characters)"
    return text


_show = shown


def _real(value: object, field: str, allowed: str) -> float:
    """A finite real number (not a bool, not text)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgument(field, f"{shown(value)} is not a number", allowed)
    v = float(value)
    if not math.isfinite(v):
        raise InvalidArgument(field, f"{_show(value)} is not finite", allowed)
    return v


def positive(value: object, field: str, allowed: str) -> float:
    """A finite real number > 0 (a measured time, a budget); ``allowed`` says so in the field's units."""
    v = _real(value, field, allowed)
    if v <= 0:
        raise InvalidArgument(field, f"{_show(value)} is not > 0", allowed)
    return v


def non_negative(value: object, field: str, allowed: str) -> float:
    """A finite real number >= 0 (a measured power, a std); ``allowed`` says so in the field's units."""
    v = _real(value, field, allowed)
    if v < 0:
        raise InvalidArgument(field, f"{_show(value)} is not >= 0", allowed)
    return v


def _integer(value: object, field: str, allowed: str, least: int, most: int | None) -> int:
    """An integer (``int`` or a numpy integer; not a bool, not a float) within [least, most]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgument(field, f"{shown(value)} is not an integer", allowed)
    v = int(value)
    if v < least or (most is not None and v > most):
        raise InvalidArgument(field, f"{v} is out of range", allowed)
    return v


def optional(rule: Callable[[object, str], T], value: object, field: str) -> T | None:
    """``rule(value, field)``, or None when ``value`` is None (an unset optional field)."""
    return None if value is None else rule(value, field)


# --------------------------------------------------------------------------- budgets and rates


def power_budget_w(value: object, field: str = "power_budget_w") -> float:
    """A power budget: a finite number of watts > 0.

    0 W is refused: no option draws no power, so a 0 W budget can only mean a mistake (an
    unset field read as 0). "No budget" is ``None`` / an absent field, never 0 or inf.
    """
    return positive(value, field, POWER_BUDGET_ALLOWED)


def time_budget_ms(value: object, field: str = "time_budget_ms") -> float:
    """A per-minibatch time budget: a finite number of milliseconds > 0 (no budget: None)."""
    return positive(value, field, TIME_BUDGET_ALLOWED)


def latency_budget_ms(value: object, field: str = "latency_budget_ms") -> float:
    """An inference latency budget (peak latency of a request): a finite number of ms > 0."""
    return positive(value, field, TIME_BUDGET_ALLOWED)


def arrival_rps(value: object, field: str = "arrival_rps") -> float:
    """A mean request arrival rate: a finite number of requests per second > 0."""
    return positive(value, field, ARRIVAL_RATE_ALLOWED)


def sample_rate_hz(value: object, field: str = "sample_rate_hz", *, maximum: float = MAX_SAMPLE_RATE_HZ) -> float:
    """A power sampling rate: a finite number of Hz with :data:`MIN_SAMPLE_RATE_HZ` <= rate <= ``maximum``
    (default 1 kHz); a rate of 1e-113 Hz would wait past the end of time between two samples."""
    allowed = f"a number of Hz with {MIN_SAMPLE_RATE_HZ:g} <= rate <= {maximum:g}"
    v = positive(value, field, allowed)
    if v > maximum or v < MIN_SAMPLE_RATE_HZ:
        raise InvalidArgument(field, f"{_show(value)} is out of range", allowed)
    return v


def risk(value: object, field: str = "risk") -> float:
    """The probability that power exceeds the budget: 0 < risk <= 0.5.

    The safe selection checks ``power_w + z(1 - risk) · power_std_w``; risk 0 would need an
    infinite margin and risk > 0.5 a bound below the mean. "Means only" is ``None``.
    """
    v = _real(value, field, RISK_ALLOWED)
    if not 0 < v <= MAX_RISK:
        raise InvalidArgument(field, f"{_show(value)} is out of range", RISK_ALLOWED)
    return v


# --------------------------------------------------------------------------- integers


def batch_size(value: object, field: str = "batch_size") -> int:
    """A minibatch size: an integer from 1 to :data:`MAX_BATCH_SIZE`."""
    return _integer(value, field, BATCH_SIZE_ALLOWED, 1, MAX_BATCH_SIZE)


def batch_sizes(values: Iterable[object], field: str = "batch_sizes") -> tuple[int, ...]:
    """One or more distinct batch sizes (each as :func:`batch_size`, named ``field[i]``), in order."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InvalidArgument(field, f"{shown(values)} is not a list of batch sizes", "one or more distinct batch sizes")
    out: list[int] = []
    for i, v in enumerate(values):
        if i >= MAX_BATCH_SIZES:
            raise InvalidArgument(field, f"lists more than {MAX_BATCH_SIZES} batch sizes",
                                  f"at most {MAX_BATCH_SIZES} distinct batch sizes")
        b = batch_size(v, f"{field}[{i}]")
        if b in out:
            raise InvalidArgument(f"{field}[{i}]", f"{b} repeats {field}[{out.index(b)}]", "distinct batch sizes")
        out.append(b)
    if not out:
        raise InvalidArgument(field, "is empty", "one or more distinct batch sizes")
    return tuple(out)


def seed(value: object, field: str = "seed") -> int:
    """A random seed: an integer from 0 to 2**32 - 1."""
    return _integer(value, field, SEED_ALLOWED, 0, MAX_SEED)


def count(value: object, field: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """A count (profiles, minibatches, modes): an integer >= ``minimum`` (default 1), <= ``maximum``."""
    allowed = f"an integer >= {minimum}" if maximum is None else f"an integer from {minimum} to {maximum}"
    return _integer(value, field, allowed, minimum, maximum)


# --------------------------------------------------------------------------- modes and names


def power_mode(spec: ModeChecker[M], mode: M, field: str = "mode", sep: str = ".") -> M:
    """A mode the device offers: ``spec.validate(mode)`` (a :class:`~edgetune.powermodes.spec.DeviceSpec`:
    cores and each frequency from its tables), its errors under ``field`` (``mode.gpu_mhz``; with
    ``sep=":"`` a file position, ``modes.csv:3:gpu_mhz``)."""
    try:
        return spec.validate(mode)
    except InvalidArgument as exc:
        raise exc.prefixed(field, sep) from None


def identifier(value: object, field: str, *, max_length: int = MAX_IDENTIFIER_LENGTH) -> str:
    """A name or id: a non-empty string of at most ``max_length`` (128) characters, no surrounding blanks."""
    allowed = f"a non-empty name of at most {max_length} characters"
    if not isinstance(value, str):
        raise InvalidArgument(field, f"{shown(value)} is not a string", allowed)
    if len(value) > max_length:
        raise InvalidArgument(field, f"has {len(value)} characters", allowed)
    if not value.strip():
        raise InvalidArgument(field, "is empty", allowed)
    if value != value.strip():
        raise InvalidArgument(field, f"{shown(value)} has leading or trailing blanks", allowed)
    return value


def node_id(value: object, field: str = "node_id") -> str:
    """A node id: an :func:`identifier` (at most 128 characters) of letters, digits, ``. _ - :``."""
    v = identifier(value, field)
    if not _NODE_ID.match(v):
        raise InvalidArgument(field, f"{shown(v)} has characters a node id cannot hold", NODE_ID_CHARS)
    return v


def text(value: object, field: str, *, max_length: int = MAX_TEXT_LENGTH) -> str:
    """Free text (may be empty): a string of at most ``max_length`` characters."""
    if not isinstance(value, str):
        raise InvalidArgument(field, f"{shown(value)} is not a string", f"text of at most {max_length} characters")
    if len(value) > max_length:
        raise InvalidArgument(field, f"has {len(value)} characters", f"at most {max_length}")
    return value


def number(value: object, field: str, *, minimum: float | None = None, maximum: float | None = None,
           exclusive_minimum: bool = False) -> float:
    """A finite real number within [minimum, maximum] (``exclusive_minimum``: > minimum)."""
    low = "" if minimum is None else (f"> {minimum:g}" if exclusive_minimum else f">= {minimum:g}")
    high = "" if maximum is None else f"<= {maximum:g}"
    allowed = "a finite number" + (f" {low}" if low else "") + (" and" if low and high else "") + (f" {high}" if high else "")
    v = _real(value, field, allowed)
    if minimum is not None and (v < minimum or (exclusive_minimum and v == minimum)):
        raise InvalidArgument(field, f"{_show(value)} is out of range", allowed)
    if maximum is not None and v > maximum:
        raise InvalidArgument(field, f"{_show(value)} is out of range", allowed)
    return v


#: A device's tables: at most this many entries each, core counts from 1 to MAX_CORES,
#: frequencies finite and > 0 up to MAX_FREQUENCY_MHZ.
MAX_TABLE_ENTRIES = 1024
MAX_CORES = 1024
MAX_FREQUENCY_MHZ = 100_000.0


def device_tables(core_counts: Sequence[object], tables_mhz: Mapping[str, Sequence[object]],
                  field: str = "device") -> None:
    """A device's power-mode tables (a registration, a spec on the wire): each non-empty, at most
    :data:`MAX_TABLE_ENTRIES` entries, core counts integers from 1 to :data:`MAX_CORES`, frequencies
    finite numbers > 0 MHz (no NaN, no negative). Errors name ``field.cpu_mhz[3]``."""
    for name, values in (("core_counts", core_counts), *tables_mhz.items()):
        at = f"{field}.{name}"
        n = repeated(values, at, maximum=MAX_TABLE_ENTRIES)
        if not n:
            raise InvalidArgument(at, "is empty", "at least one value")
        for i, v in enumerate(values):
            if name == "core_counts":
                count(v, f"{at}[{i}]", minimum=1, maximum=MAX_CORES)
            else:
                number(v, f"{at}[{i}]", minimum=0.0, maximum=MAX_FREQUENCY_MHZ, exclusive_minimum=True)


#: Largest integer hyper-parameter (epochs, hidden units, estimators, restarts).
MAX_PARAMETER_INT = 1_000_000


def parameter(value: object, default: object, field: str) -> object:
    """A method's hyper-parameter (``lr``, ``epochs``, ``transfer_lr``), of the type of its default:
    a bool for a bool, an integer from 0 to :data:`MAX_PARAMETER_INT` for an int, a finite number
    >= 0 for a float (> 0 for a learning rate ``*lr``), text for text. ``lr: "banana"`` and
    ``lr: nan`` are refused here, not by a failed fit (or a model that predicts NaN)."""
    name = field.rsplit(".", 1)[-1]
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise InvalidArgument(field, f"{shown(value)} is not true / false", "true or false")
        return value
    if isinstance(default, int):
        return _integer(value, field, f"an integer from 0 to {MAX_PARAMETER_INT}", 0, MAX_PARAMETER_INT)
    if isinstance(default, float):
        if name.endswith("lr"):
            return number(value, field, minimum=0.0, exclusive_minimum=True)
        return number(value, field, minimum=0.0)
    if isinstance(default, str):
        return text(value, field, max_length=MAX_IDENTIFIER_LENGTH)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):  # a default of None: any finite number
        return number(value, field)
    return value


def repeated(values: object, field: str, *, maximum: int = MAX_REPEATED_ITEMS) -> int:
    """A list of at most ``maximum`` items; returns its length."""
    n = len(values)  # type: ignore[arg-type]
    if n > maximum:
        raise InvalidArgument(field, f"has {n} items", f"at most {maximum}")
    return n


# --------------------------------------------------------------------------- budget sweeps


def is_sweep(spec: object) -> bool:
    """Whether a ``--power-budget`` text is a sweep (``A:B[:STEP]``) rather than one budget."""
    return ":" in str(spec)


def budget_sweep(spec: object, field: str = "--power-budget") -> list[float]:
    """``"17:50:1"`` → ``[17.0, 18.0, …, 50.0]`` (inclusive end); ``"17:20"`` steps by 1; ``"20"`` → ``[20.0]``.

    Every budget is a :func:`power_budget_w` (> 0 W); ``A <= B``, ``STEP > 0``, and at most
    :data:`MAX_SWEEP_POINTS` budgets.
    """
    text = str(spec).strip()
    parts = text.split(":")
    if len(parts) not in (1, 2, 3):
        raise InvalidArgument(field, f"{text!r} is neither a number nor A:B[:STEP]", SWEEP_ALLOWED)
    values: list[float] = []
    for part in parts:
        try:
            v = float(part)
        except ValueError:
            raise InvalidArgument(field, f"{part.strip()!r} in {text!r} is not a number", SWEEP_ALLOWED) from None
        values.append(v)
    if len(values) == 1:  # one budget: its own rule and wording, as the library and services give it
        return [power_budget_w(values[0], field)]
    return budget_range(values[0], values[1], values[2] if len(values) == 3 else 1.0, field)


def budget_range(start: object, stop: object, step: object = 1.0, field: str = "sweep") -> list[float]:
    """The budgets ``start, start + step, …`` up to ``stop`` inclusive (the rules of :func:`budget_sweep`)."""
    try:
        a = power_budget_w(start, field)
        b = power_budget_w(stop, field)
        s = positive(step, field, SWEEP_ALLOWED)
    except InvalidArgument as exc:  # name the sweep, keep what was wrong with the part
        raise InvalidArgument(field, f"sweep {_show(start)}:{_show(stop)}:{_show(step)}: {exc.message}",
                              SWEEP_ALLOWED) from None
    if b < a:
        raise InvalidArgument(field, f"sweep {a:g}:{b:g}:{s:g} ends below its start", SWEEP_ALLOWED)
    n = math.floor((b - a) / s + 1e-9) + 1  # the tolerance keeps 0.1-steps inclusive
    if n > MAX_SWEEP_POINTS:
        raise InvalidArgument(field, f"sweep {a:g}:{b:g}:{s:g} has {n} budgets", f"at most {MAX_SWEEP_POINTS}")
    return [round(a + k * s, 10) for k in range(n)]
