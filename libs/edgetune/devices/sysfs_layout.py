"""Where a Jetson keeps its knobs: finding CPU, GPU and EMC controls and the model under a root.

Pure reading. Every function takes the sysroot (``/`` on a device, a fake tree in tests) and
returns what it found as small dataclasses holding *relative* paths, so the same layout can be
reported, snapshotted and written through :class:`~edgetune.devices.sysfs.SysfsJetson`.

Layouts handled (sources in ``tests/fixtures/sysroots/README.md``):

- model: ``/proc/device-tree/model`` and ``compatible`` (NUL-separated), ``/etc/nv_tegra_release``
- CPU: ``/sys/devices/system/cpu/cpufreq/policyN`` (kernel ≥ 4.x, Orin / Xavier) or per-CPU
  ``cpuN/cpufreq`` (Nano, JetPack 4), grouped by ``related_cpus``; frequencies in kHz;
  hot-plug through ``cpuN/online``
- GPU devfreq (frequencies in Hz): ``/sys/devices/platform/17000000.gpu/devfreq_dev`` (JP 6.x),
  ``/sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu`` (JP 6.0),
  ``/sys/devices/platform/17000000.ga10b/devfreq/17000000.ga10b`` and
  ``/sys/devices/17000000.ga10b/...`` (Orin, JP 5), ``/sys/devices/17000000.gv11b/...`` (Xavier),
  ``/sys/devices/57000000.gpu/...`` and ``gpu.0`` (Nano), or any ``/sys/class/devfreq`` entry
  named like a Tegra GPU
- EMC: the bandwidth manager's devfreq ``/sys/class/devfreq/bwmgr`` (Thor, Hz); BPMP debugfs ``/sys/kernel/debug/bpmp/debug/clk/emc/{rate,min_rate,max_rate,mrq_rate_locked}``
  with the table in ``bpmp/debug/emc/possible_rates`` (t186 / t194 / t234); the t210 clock
  debugfs ``/sys/kernel/debug/clk/emc/clk_{rate,possible_rates}`` with
  ``clk/override.emc/clk_{update_rate,state}``; the nvpmodel caps
  ``/sys/kernel/nvpmodel_emc_cap/emc_iso_cap`` (JP 4/5) or ``/sys/kernel/nvpmodel_clk_cap/emc``
  (JP 6). Rates in Hz, tables in kHz.
"""

from __future__ import annotations

import filecmp
import glob
import os
import re
from dataclasses import dataclass, field

# --- reading ----------------------------------------------------------------------------------


def rpath(root: str, rel: str) -> str:
    """``rel`` (a path relative to the sysroot) as a path on this machine."""
    return os.path.join(root, rel)


def read_text(root: str, rel: str) -> str | None:
    """A sysfs attribute's text without the trailing newline / NULs; ``None`` if absent or unreadable."""
    try:
        with open(rpath(root, rel), "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return raw.decode("utf-8", "replace").strip().strip("\0").strip()


def read_int(root: str, rel: str) -> int | None:
    text = read_text(root, rel)
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def parse_int_list(text: str | None) -> list[int]:
    """``"204000 665600 (kHz)"`` -> ``[204000, 665600]``: every integer token, sorted, unique."""
    if not text:
        return []
    return sorted({int(tok) for tok in text.split() if tok.isdigit()})


def parse_cpu_list(text: str | None) -> list[int]:
    """Kernel CPU lists: ``"0-3,8"`` or ``"0 1 2 3"`` -> ``[0, 1, 2, 3, 8]``."""
    if not text:
        return []
    cpus: set[int] = set()
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return sorted(cpus)


def rel_glob(root: str, pattern: str) -> list[str]:
    """Relative paths under ``root`` matching ``pattern`` (sorted)."""
    base = os.path.join(root, "")
    return sorted(p[len(base):] for p in glob.glob(os.path.join(glob.escape(root), pattern)))


# --- model ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelInfo:
    model: str  # device-tree model string, "" when absent
    compatible: tuple[str, ...]
    soc: str  # "t234", "t194", "t210", "t186" or ""
    builtin: str | None  # name of the matching built-in spec, None when unknown
    l4t: str  # "R35.4.1" or ""
    known: str | None = None  # a recognised model without a built-in spec ("thor"), else None


# (compatible substring, model substring, built-in spec name); first match wins.
_MODEL_RULES: tuple[tuple[str, str, str], ...] = (
    ("p3701", "agx orin", "orin-agx"),
    # Orin Nano with the JetPack 6.1+ Super modes: the dev kit's model string ends in "Super".
    ("", "orin nano engineering reference developer kit super", "orin-nano-super"),
    ("", "orin nano developer kit super", "orin-nano-super"),
    ("p3767-0000", "", "orin-nx"),
    ("", "orin nx", "orin-nx"),
    ("p3767-0003", "", "orin-nano"),
    ("p3767-0004", "", "orin-nano"),
    ("p3767-0005", "", "orin-nano"),
    ("", "orin nano", "orin-nano"),
    ("p2888", "agx xavier", "xavier-agx"),
    ("p2972", "jetson-agx", "xavier-agx"),
    ("p3448", "jetson nano", "nano"),
    ("p3450", "", "nano"),
    ("p3636", "tx2 nx", "tx2-nx"),
)
#: Recognised models with no built-in spec (``edgetune.powermodes.specs.UNTABULATED``).
_KNOWN_RULES: tuple[tuple[str, str, str], ...] = (
    ("tegra264", "thor", "thor"),
    ("p3834", "", "thor"),
)


def read_model(root: str) -> ModelInfo:
    model = read_text(root, "proc/device-tree/model") or ""
    raw = None
    try:
        with open(rpath(root, "proc/device-tree/compatible"), "rb") as fh:
            raw = fh.read()
    except OSError:
        pass
    compatible = tuple(c.decode("utf-8", "replace") for c in (raw or b"").split(b"\0") if c)
    soc = ""
    for c in compatible:
        m = re.fullmatch(r"nvidia,tegra(\d{3})", c)
        if m:
            soc = "t" + m.group(1)
            break
    compat_text = " ".join(compatible).lower()
    model_l = model.lower()
    def first(rules: tuple[tuple[str, str, str], ...]) -> str | None:
        for compat_key, model_key, name in rules:
            if (compat_key and compat_key in compat_text) or (model_key and model_key in model_l):
                return name
        return None

    builtin = first(_MODEL_RULES)
    known = None if builtin else first(_KNOWN_RULES)
    return ModelInfo(model, compatible, soc, builtin, read_l4t(root), known)


def read_l4t(root: str) -> str:
    text = read_text(root, "etc/nv_tegra_release") or ""
    m = re.search(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
    return f"R{m.group(1)}.{m.group(2)}" if m else ""


# --- CPU --------------------------------------------------------------------------------------
CPU_BASE = "sys/devices/system/cpu"


@dataclass(frozen=True)
class CpuPolicy:
    path: str  # relative folder holding scaling_* (policyN or cpuN/cpufreq)
    cpus: tuple[int, ...]
    table_khz: tuple[int, ...]


@dataclass(frozen=True)
class CpuLayout:
    n_cpus: int
    #: CPU index -> relative path of its ``online`` file; CPUs without one cannot be unplugged.
    online_files: dict[int, str]
    policies: tuple[CpuPolicy, ...]

    @property
    def table_khz(self) -> tuple[int, ...]:
        """Frequencies every policy accepts (one mode sets every cluster to the same clock)."""
        tables = [set(p.table_khz) for p in self.policies if p.table_khz]
        if not tables:
            return ()
        common = set.intersection(*tables)
        return tuple(sorted(common or tables[0]))

    @property
    def min_cores(self) -> int:
        """Fewest online cores reachable: CPUs 0..k-1 are always on when they have no online file."""
        k = 1
        while k < self.n_cpus and k not in self.online_files:
            k += 1
        return k


def find_cpus(root: str) -> CpuLayout | None:
    cpus = parse_cpu_list(read_text(root, f"{CPU_BASE}/possible"))
    if not cpus:
        cpus = sorted(int(m.group(1)) for p in rel_glob(root, f"{CPU_BASE}/cpu[0-9]*")
                      if (m := re.fullmatch(r".*/cpu(\d+)", p)))
    if not cpus:
        return None
    online_files = {c: f"{CPU_BASE}/cpu{c}/online" for c in cpus
                    if os.path.isfile(rpath(root, f"{CPU_BASE}/cpu{c}/online"))}
    dirs = rel_glob(root, f"{CPU_BASE}/cpufreq/policy[0-9]*")
    if not dirs:  # JetPack 4 / no policy folders: per-CPU cpufreq (links to the shared policy)
        dirs = [d for c in cpus if os.path.isdir(rpath(root, d := f"{CPU_BASE}/cpu{c}/cpufreq"))]
    policies: list[CpuPolicy] = []
    covered: set[int] = set()
    for d in dirs:
        related = parse_cpu_list(read_text(root, f"{d}/related_cpus") or read_text(root, f"{d}/affected_cpus"))
        if not related:
            m = re.search(r"(?:policy|cpu)(\d+)", d)
            related = [int(m.group(1))] if m else []
        if covered.intersection(related):
            continue  # another folder of the same policy (cpuN/cpufreq links)
        covered.update(related)
        table = parse_int_list(read_text(root, f"{d}/scaling_available_frequencies"))
        policies.append(CpuPolicy(d, tuple(related), tuple(table)))
    return CpuLayout(len(cpus), online_files, tuple(policies))


# --- GPU --------------------------------------------------------------------------------------
#: Known GPU devfreq folders, newest layouts first.
GPU_DEVFREQ_CANDIDATES: tuple[str, ...] = (
    "sys/devices/platform/17000000.gpu/devfreq_dev",
    "sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu",
    "sys/devices/platform/17000000.ga10b/devfreq/17000000.ga10b",
    "sys/devices/17000000.ga10b/devfreq/17000000.ga10b",
    "sys/devices/platform/17000000.gv11b/devfreq/17000000.gv11b",
    "sys/devices/17000000.gv11b/devfreq/17000000.gv11b",
    "sys/devices/17000000.gp10b/devfreq/17000000.gp10b",
    "sys/devices/57000000.gpu/devfreq/57000000.gpu",
    "sys/devices/gpu.0/devfreq/57000000.gpu",
)
#: Device-tree node names of Tegra integrated GPUs (jetson-stats' find_igpu list).
GPU_NODE_NAMES = ("ga10b", "gv11b", "gp10b", "gpu")


@dataclass(frozen=True)
class GpuLayout:
    devfreq: str  # relative folder with available_frequencies, min_freq, max_freq, cur_freq, governor
    table_hz: tuple[int, ...]
    railgate: str | None = None  # relative path of railgate_enable
    scaling_3d: str | None = None  # relative path of enable_3d_scaling
    power_control: str | None = None  # relative path of power/control


def find_gpu(root: str) -> GpuLayout | None:
    candidates = list(GPU_DEVFREQ_CANDIDATES)
    # /sys/class/devfreq entries are links on a real device; follow those named like a GPU.
    for entry in rel_glob(root, "sys/class/devfreq/*"):
        name = os.path.basename(entry)
        if any(n in name for n in GPU_NODE_NAMES):
            candidates.append(entry)
    for rel in candidates:
        if not os.path.isfile(rpath(root, f"{rel}/available_frequencies")):
            continue
        table = parse_int_list(read_text(root, f"{rel}/available_frequencies"))
        if not table:
            continue
        dirs = [_gpu_device_dir(rel), "sys/devices/platform/gpu.0", "sys/devices/gpu.0"]
        return GpuLayout(rel, tuple(table), _first_file(root, dirs, "railgate_enable"),
                         _first_file(root, dirs, "enable_3d_scaling"), _first_file(root, dirs, "power/control"))
    return None


def _first_file(root: str, dirs: list[str], name: str) -> str | None:
    for d in dirs:
        if d and os.path.isfile(rpath(root, f"{d}/{name}")):
            return f"{d}/{name}"
    return None


def _gpu_device_dir(devfreq_rel: str) -> str:
    """The GPU device folder that holds railgate_enable: the parent of ``devfreq/<name>`` or of ``devfreq_dev``."""
    parts = devfreq_rel.split("/")
    if parts[-1] == "devfreq_dev":
        return "/".join(parts[:-1])
    if len(parts) >= 2 and parts[-2] == "devfreq":
        return "/".join(parts[:-2])
    return ""


# --- EMC --------------------------------------------------------------------------------------
BPMP_EMC = "sys/kernel/debug/bpmp/debug/clk/emc"
BPMP_EMC_TABLE = "sys/kernel/debug/bpmp/debug/emc/possible_rates"
T210_EMC = "sys/kernel/debug/clk/emc"
T210_OVERRIDE = "sys/kernel/debug/clk/override.emc"
EMC_CAPS = ("sys/kernel/nvpmodel_emc_cap/emc_iso_cap", "sys/kernel/nvpmodel_clk_cap/emc")
#: EMC as a devfreq device (Hz): Jetson Thor's bandwidth manager (public Thor benchmark scripts
#: read /sys/class/devfreq/bwmgr/{cur,min,max}_freq and lock it at 4266000000 Hz).
EMC_DEVFREQ_CANDIDATES = ("sys/class/devfreq/bwmgr",)


@dataclass(frozen=True)
class EmcLayout:
    #: "bpmp" (rate + mrq_rate_locked), "t210-override" (clk_update_rate + clk_state),
    #: "devfreq" (min_freq = max_freq, Thor's bwmgr), "cap" (nvpmodel cap only: bounds the
    #: clock, does not pin it) or "none" (read-only).
    method: str
    table_khz: tuple[int, ...]
    table_source: str | None
    rate_file: str | None  # current rate, Hz
    set_file: str | None  # where a new rate (Hz) is written
    lock_file: str | None  # "1" pins the written rate
    cap_file: str | None  # nvpmodel EMC cap (Hz, 0 = none)
    extra: dict = field(default_factory=dict)


def find_emc(root: str) -> EmcLayout | None:
    def exists(rel: str) -> bool:
        return os.path.isfile(rpath(root, rel))

    cap = next((c for c in EMC_CAPS if exists(c)), None)
    if exists(f"{BPMP_EMC}/rate"):
        table_src = BPMP_EMC_TABLE if exists(BPMP_EMC_TABLE) else None
        table = parse_int_list(read_text(root, table_src)) if table_src else []
        return EmcLayout("bpmp", tuple(table), table_src, f"{BPMP_EMC}/rate", f"{BPMP_EMC}/rate",
                         f"{BPMP_EMC}/mrq_rate_locked" if exists(f"{BPMP_EMC}/mrq_rate_locked") else None,
                         cap, {"min_rate": f"{BPMP_EMC}/min_rate", "max_rate": f"{BPMP_EMC}/max_rate"})
    if exists(f"{T210_EMC}/clk_rate") or exists(f"{T210_OVERRIDE}/clk_rate"):
        table_src = f"{T210_EMC}/clk_possible_rates" if exists(f"{T210_EMC}/clk_possible_rates") else None
        table = parse_int_list(read_text(root, table_src)) if table_src else []
        rate = f"{T210_OVERRIDE}/clk_rate" if exists(f"{T210_OVERRIDE}/clk_rate") else f"{T210_EMC}/clk_rate"
        can_set = exists(f"{T210_OVERRIDE}/clk_update_rate") and exists(f"{T210_OVERRIDE}/clk_state")
        return EmcLayout("t210-override" if can_set else "none", tuple(table), table_src, rate,
                         f"{T210_OVERRIDE}/clk_update_rate" if can_set else None,
                         f"{T210_OVERRIDE}/clk_state" if can_set else None, cap)
    for rel in EMC_DEVFREQ_CANDIDATES:
        if exists(f"{rel}/cur_freq") and exists(f"{rel}/max_freq"):
            table_src = f"{rel}/available_frequencies" if exists(f"{rel}/available_frequencies") else None
            table = [hz // 1000 for hz in parse_int_list(read_text(root, table_src))] if table_src else []
            return EmcLayout("devfreq", tuple(table), table_src, f"{rel}/cur_freq", None, None, cap,
                             {"devfreq": rel})
    if cap:
        return EmcLayout("cap", (), None, None, cap, None, cap)
    return None


def tree_differences(a: str | os.PathLike, b: str | os.PathLike) -> list[str]:
    """Relative paths whose content differs between two sysroots (or that exist in one only): how a
    test or a check shows that a device was left exactly as found (a copy taken before vs the root)."""
    out: list[str] = []

    def walk(cmp: filecmp.dircmp, rel: str) -> None:
        out.extend(f"{rel}{n}" for n in cmp.left_only + cmp.right_only)
        _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
        out.extend(f"{rel}{n}" for n in mismatch + errors)
        for name, sub in cmp.subdirs.items():
            walk(sub, f"{rel}{name}/")

    walk(filecmp.dircmp(a, b), "")
    return out
