"""Parse real ``nvpmodel.conf`` files and turn their power models into :class:`Preset`s.

The format (every JetPack since the TX2, T186 … T234):

``< PARAM TYPE=FILE|CLOCK NAME=X >``
    declares knob ``X``; the lines after it are ``ARG_NAME /sys/path``.
``< POWER_MODEL ID=n NAME=NAME >``
    starts a power model; the lines after it are ``PARAM ARG VALUE``, e.g. ``CPU_ONLINE CORE_3 0``,
    ``CPU_A78_0 MAX_FREQ 1728000``, ``GPU MAX_FREQ 624750000``, ``EMC MAX_FREQ 0``,
    ``TPC_POWER_GATING TPC_PG_MASK 254``.
``< PM_CONFIG DEFAULT=n >``
    the default model. ``#`` starts a comment. Other ``< … >`` sections (``FAN_CONFIG``) are skipped.

CPU clusters are spelled per SoC (``CPU_A57``, ``CPU_DENVER``, ``CPU_DENVER_0``, ``CPU_A78_0``):
any ``CPU_*`` clock but ``CPU_ONLINE`` counts. CPU frequencies are written in kHz (cpufreq), GPU
and EMC in Hz (devfreq / clk); a value that only makes sense in the other unit (a CPU value
≥ 10⁷ or a GPU / EMC value < 10⁷) is read in that unit. ``-1`` (INT_MAX) means no cap, and so
does ``0`` for ``MAX_FREQ`` (nvpmodel's ``EMC MAX_FREQ 0``). A core not named in a model stays
online (``CORE_0`` can never go offline). With several CPU clusters capped differently, the
preset's CPU cap is the fastest cluster's (PowerMode has one CPU clock).

Errors name the file and line: ``nvpmodel.conf:12: …`` (:class:`InvalidArgument`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from edgetune.errors import InvalidArgument
from edgetune.powermodes.spec import DeviceSpec, Preset

_HEADER = re.compile(r"^<\s*(?P<kind>[A-Z_]+)(?P<attrs>(?:\s+[A-Z_]+=\S+?)*)\s*>$")
_ATTR = re.compile(r"([A-Z_]+)=(\S+)")
_CORE = re.compile(r"^CORE_(\d+)$")
_BUDGET = re.compile(r"(\d+(?:\.\d+)?)W", re.IGNORECASE)

#: Below this a GPU / EMC value is in kHz, at or above it a CPU value is in Hz.
_UNIT_SWITCH = 10_000_000


@dataclass(frozen=True)
class ParamDecl:
    """A ``< PARAM TYPE=… NAME=… >`` declaration: argument names and their sysfs paths."""

    name: str
    type: str  # FILE or CLOCK
    args: dict[str, str] = field(default_factory=dict, compare=False)
    line: int = 0


@dataclass(frozen=True)
class Setting:
    """One ``PARAM ARG VALUE`` line of a power model."""

    param: str
    arg: str
    value: str
    line: int


@dataclass(frozen=True)
class PowerModel:
    """One ``< POWER_MODEL >`` block, with the caps it sets read out (MHz; ``None`` = no cap)."""

    id: int
    name: str
    settings: tuple[Setting, ...]
    line: int
    source: str = ""

    @property
    def core_online(self) -> dict[int, bool]:
        """``CORE_k`` → online, for the cores the model names."""
        out: dict[int, bool] = {}
        for s in self.settings:
            m = _CORE.match(s.arg)
            if s.param == "CPU_ONLINE" and m:
                out[int(m.group(1))] = s.value != "0"
        return out

    def cores_online(self, max_cores: int) -> int:
        """Online cores out of ``max_cores``; unnamed cores stay online, core 0 always is."""
        named = self.core_online
        return sum(1 for k in range(max_cores) if k == 0 or named.get(k, True))

    @property
    def cpu_caps_mhz(self) -> dict[str, float | None]:
        """``MAX_FREQ`` per CPU cluster clock (``CPU_A78_0`` → 1728.0), ``None`` = uncapped."""
        return {s.param: self._mhz(s) for s in self.settings
                if _is_cpu_clock(s.param) and s.arg == "MAX_FREQ"}

    @property
    def cpu_max_mhz(self) -> float | None:
        caps = self.cpu_caps_mhz
        if not caps or any(c is None for c in caps.values()):
            return None
        return max(c for c in caps.values() if c is not None)

    @property
    def gpu_max_mhz(self) -> float | None:
        return self._cap("GPU")

    @property
    def emc_max_mhz(self) -> float | None:
        return self._cap("EMC")

    @property
    def tpc_pg_mask(self) -> int | None:
        """GPU TPC power-gating mask (bits set = TPCs off), when the model sets one."""
        for s in self.settings:
            if s.param == "TPC_POWER_GATING":
                return int(s.value, 0)
        return None

    @property
    def budget_w(self) -> float | None:
        """Nominal budget read from the name (``MODE_15W`` → 15.0, ``MAXN`` → None)."""
        m = _BUDGET.search(self.name)
        return float(m.group(1)) if m else None

    def to_preset(self, spec: DeviceSpec) -> Preset:
        """This model as a preset of ``spec``, caps floored to its tables as the governors do."""
        beyond = sorted(k for k in self.core_online if k >= spec.max_cores)
        if beyond:  # a file written for a board with more CPUs
            raise InvalidArgument(f"{self.source}:{self.line}",
                                  f"power model {self.name!r} names CORE_{beyond[-1]}, but {spec.name} has "
                                  f"{spec.max_cores} CPUs", f"CORE_0 … CORE_{spec.max_cores - 1}")
        cores = self.cores_online(spec.max_cores)
        if cores not in spec.core_counts:
            raise InvalidArgument(f"{self.source}:{self.line}",
                                  f"power model {self.name!r} puts {cores} cores online on {spec.name}",
                                  " ".join(str(c) for c in spec.core_counts))
        return Preset.from_caps(spec, self.id, self.name, cores, self.cpu_max_mhz, self.gpu_max_mhz,
                                self.emc_max_mhz, self.budget_w)

    # -- helpers -----------------------------------------------------------------------------
    def _cap(self, param: str) -> float | None:
        for s in self.settings:
            if s.param == param and s.arg == "MAX_FREQ":
                return self._mhz(s)
        return None

    def _mhz(self, s: Setting) -> float | None:
        try:
            raw = int(s.value)
        except ValueError:
            raise InvalidArgument(f"{self.source}:{s.line}", f"{s.param} {s.arg} must be an integer frequency, "
                                  f"got {s.value!r}", "-1, 0 or a frequency in kHz (CPU) / Hz (GPU, EMC)") from None
        if raw <= 0:  # -1 is INT_MAX, 0 lifts the cap (EMC MAX_FREQ 0)
            return None
        if _is_cpu_clock(s.param):
            return raw / 1e6 if raw >= _UNIT_SWITCH else raw / 1e3
        return raw / 1e3 if raw < _UNIT_SWITCH else raw / 1e6


@dataclass(frozen=True)
class NvpmodelConf:
    """A parsed nvpmodel.conf: its power models, default model id and PARAM declarations."""

    power_models: tuple[PowerModel, ...]
    default_id: int | None
    params: dict[str, ParamDecl] = field(default_factory=dict, compare=False)
    source: str = ""

    def model(self, key: int | str) -> PowerModel:
        for m in self.power_models:
            if m.id == key or m.name == key:
                return m
        raise InvalidArgument("power_model", f"{self.source} has no power model {key!r}",
                              ", ".join(f"{m.id}:{m.name}" for m in self.power_models))

    def default(self) -> PowerModel | None:
        return None if self.default_id is None else self.model(self.default_id)

    def to_presets(self, spec: DeviceSpec) -> tuple[Preset, ...]:
        """Every power model as a preset of ``spec`` (file order)."""
        return tuple(m.to_preset(spec) for m in self.power_models)


def load_nvpmodel(path: str | Path) -> NvpmodelConf:
    """Read and parse the nvpmodel.conf at ``path``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InvalidArgument(str(p), f"cannot read nvpmodel.conf: {exc.strerror or exc}") from None
    return parse_nvpmodel(text, source=p.name)


def parse_nvpmodel(text: str, source: str = "nvpmodel.conf") -> NvpmodelConf:
    """Parse nvpmodel.conf text; ``source`` names the file in error messages."""
    params: dict[str, ParamDecl] = {}
    models: list[PowerModel] = []
    default_id: int | None = None
    default_line = 0
    section: str | None = None  # "PARAM", "POWER_MODEL", or None (outside / skipped section)
    param: ParamDecl | None = None
    model_head: tuple[int, str, int] | None = None
    settings: list[Setting] = []
    seen_header = False

    def where(n: int) -> str:
        return f"{source}:{n}"

    def close_model() -> None:
        nonlocal model_head, settings
        if model_head is not None:
            mid, mname, mline = model_head
            models.append(PowerModel(mid, mname, tuple(settings), mline, source))
        model_head, settings = None, []

    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("<"):
            m = _HEADER.match(line)
            if not m:
                raise InvalidArgument(where(n), f"malformed section header {line!r}",
                                      "< PARAM TYPE=… NAME=… >, < POWER_MODEL ID=… NAME=… >, < PM_CONFIG DEFAULT=… >")
            kind, attrs = m.group("kind"), dict(_ATTR.findall(m.group("attrs")))
            close_model()
            param = None
            seen_header = True
            if kind == "PARAM":
                if "NAME" not in attrs or "TYPE" not in attrs:
                    raise InvalidArgument(where(n), "PARAM needs TYPE= and NAME=", "< PARAM TYPE=FILE|CLOCK NAME=… >")
                param = ParamDecl(attrs["NAME"], attrs["TYPE"], {}, n)
                params[param.name] = param
                section = "PARAM"
            elif kind == "POWER_MODEL":
                if "ID" not in attrs or "NAME" not in attrs:
                    raise InvalidArgument(where(n), "POWER_MODEL needs ID= and NAME=", "< POWER_MODEL ID=n NAME=… >")
                mid = _int(attrs["ID"], where(n), "ID")
                if any(p.id == mid for p in models):
                    raise InvalidArgument(where(n), f"power model ID={mid} is defined twice")
                model_head = (mid, attrs["NAME"], n)
                section = "POWER_MODEL"
            elif kind == "PM_CONFIG":
                if "DEFAULT" not in attrs:
                    raise InvalidArgument(where(n), "PM_CONFIG needs DEFAULT=", "< PM_CONFIG DEFAULT=n >")
                default_id, default_line = _int(attrs["DEFAULT"], where(n), "DEFAULT"), n
                section = None
            else:  # FAN_CONFIG and friends: not about power modes
                section = None
            continue
        tokens = line.split()
        if section == "PARAM" and param is not None:  # param is the PARAM section being read
            if len(tokens) != 2:
                raise InvalidArgument(where(n), f"expected 'ARG_NAME /sys/path' in PARAM {param.name}, got {line!r}")
            param.args[tokens[0]] = tokens[1]
        elif section == "POWER_MODEL" and model_head is not None:  # set by its header
            if len(tokens) != 3:
                raise InvalidArgument(where(n), f"expected 'PARAM ARG VALUE' in POWER_MODEL {model_head[1]}, "
                                      f"got {line!r}")
            if params and tokens[0] not in params:  # nvpmodel refuses undeclared knobs too
                raise InvalidArgument(where(n), f"PARAM {tokens[0]} is used but never declared",
                                      ", ".join(params))
            settings.append(Setting(tokens[0], tokens[1], tokens[2], n))
        elif not seen_header:
            raise InvalidArgument(where(n), f"line outside any section: {line!r}",
                                  "lines belong under < PARAM … > or < POWER_MODEL … >")
    close_model()

    if not models:
        raise InvalidArgument(source, "no < POWER_MODEL ID=… NAME=… > section", "at least one power model")
    conf = NvpmodelConf(tuple(models), default_id, params, source)
    if default_id is not None and all(m.id != default_id for m in models):
        raise InvalidArgument(where(default_line), f"PM_CONFIG DEFAULT={default_id} names no power model",
                              ", ".join(str(m.id) for m in models))
    for model in models:  # surface non-numeric clock values now, with their line
        _ = (model.cpu_caps_mhz, model.gpu_max_mhz, model.emc_max_mhz)
    return conf


def _is_cpu_clock(param: str) -> bool:
    return param.startswith("CPU_") and param != "CPU_ONLINE"


def _int(text: str, where: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidArgument(where, f"{what}={text!r} is not an integer") from None
