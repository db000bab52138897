"""Power-mode specs, grids and nvpmodel.conf parsing (libs/edgetune/powermodes)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edgetune.base.mode import PowerMode
from edgetune.errors import InvalidArgument
from edgetune.powermodes.grids import (
    GRID_NAMES,
    ModeGrid,
    enumerate_modes,
    maxn,
    midpoint,
    modes_array,
    named_grid,
    neighbours,
)
from edgetune.powermodes.nvpmodel import load_nvpmodel, parse_nvpmodel
from edgetune.powermodes.specs import SPECS, get_spec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvpmodel"
ORIN = SPECS["orin-agx"]
XAVIER = SPECS["xavier-agx"]


# -- specs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,shape,count", [
    ("orin-agx", (12, 29, 13, 4), 18_096),
    ("xavier-agx", (8, 29, 14, 9), 29_232),
])
def test_mode_space_sizes_of_the_papers(name, shape, count):
    spec = SPECS[name]
    assert (len(spec.core_counts), len(spec.cpu_mhz), len(spec.gpu_mhz), len(spec.emc_mhz)) == shape
    assert spec.n_modes == count


def test_real_table_endpoints():
    assert ORIN.cpu_mhz[-1] == 2201.6 and ORIN.gpu_mhz[-1] == 1300.5 and ORIN.emc_mhz == (204.0, 665.6, 2133.0, 3199.0)
    assert XAVIER.cpu_mhz[-1] == 2265.6 and XAVIER.gpu_mhz[-1] == 1377.0
    nano = SPECS["nano"]
    assert nano.gpu_mhz == tuple(round(76.8 * k, 2) for k in range(1, 13))  # 76.8 … 921.6


@pytest.mark.parametrize("spec", SPECS.values(), ids=list(SPECS))
def test_tables_ascending_and_presets_validate(spec):
    for dim in ("cpu_mhz", "gpu_mhz", "emc_mhz"):
        t = spec.table(dim)
        assert all(b > a for a, b in zip(t, t[1:], strict=False)), dim
    assert spec.presets, "every built-in device lists its nvpmodel presets"
    for p in spec.presets:
        assert spec.validate(p.mode()) == p.mode()
    # an uncapped preset (MAXN, MAXN_SUPER) is the top of the tables; the Orin Nano's 15W is capped
    assert any(p.mode() == spec.maxn() for p in spec.presets) or spec.name == "orin-nano"


def test_preset_caps_are_floored_like_the_governor():
    nano = SPECS["nano"]
    five = nano.preset("5W")  # CPU_A57 MAX_FREQ 918000, GPU MAX_FREQ 640000000
    assert (five.cores, five.cpu_max_mhz, five.gpu_max_mhz, five.emc_max_mhz) == (2, 825.6, 614.4, 1600.0)
    assert XAVIER.preset("MODE_15W").emc_max_mhz == 1331.2  # cap 1333 MHz
    assert ORIN.preset(3).name == "MODE_50W" and ORIN.preset("MODE_30W").cores == 8
    assert ORIN.floor("gpu_mhz", 714.0) == 624.75
    assert ORIN.floor("gpu_mhz", 1300.5) == 1300.5
    assert ORIN.floor("cpu_mhz", None) == 2201.6
    assert ORIN.floor("cpu_mhz", 10.0) == 115.2  # below the table: the lowest clock


def test_validation_names_field_and_allowed_values():
    with pytest.raises(InvalidArgument) as e:
        ORIN.validate(PowerMode(8, 1344.0, 700.0, 2133.0))
    assert e.value.field == "gpu_mhz" and "1300.5" in e.value.allowed and "114.75" in e.value.allowed
    with pytest.raises(InvalidArgument) as e:
        ORIN.validate(PowerMode(13, 1344.0, 726.75, 2133.0))
    assert e.value.field == "cores" and "12" in str(e.value)
    with pytest.raises(InvalidArgument) as e:
        get_spec("orin-agx-64")
    assert e.value.field == "device" and "xavier-agx" in e.value.allowed
    assert ORIN.validate(PowerMode(8, 1344.0004, 726.75, 2133)) == PowerMode(8, 1344.0, 726.75, 2133.0)


# -- grids -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,grid,count", [
    ("orin-agx", "full", 18_096), ("orin-agx", "powertrain", 4_368), ("orin-agx", "fulcrum", 441),
    ("xavier-agx", "full", 29_232),
])
def test_grid_counts(name, grid, count):
    arr = modes_array(SPECS[name], grid)
    assert arr.shape == (count, 4) and arr.dtype == np.float64
    assert len(np.unique(arr, axis=0)) == count


def test_powertrain_grid_is_the_papers_subset():
    g = named_grid(ORIN, "powertrain")
    assert g.cores == (2, 4, 6, 8, 10, 12)
    # every other of the 27 fastest CPU entries, from the top (the authors' profiling script)
    assert g.cpu_mhz == (268.8, 422.4, 576.0, 729.6, 883.2, 1036.8, 1190.4, 1344.0, 1497.6,
                         1651.2, 1804.8, 1958.4, 2112.0, 2201.6)
    assert g.gpu_mhz == ORIN.gpu_mhz and g.emc_mhz == ORIN.emc_mhz


def test_fulcrum_grid_and_gmd_midpoint():
    g = named_grid(ORIN, "fulcrum")
    assert g.cores == (4, 8, 12)
    assert g.cpu_mhz == (422.4, 729.6, 1036.8, 1344.0, 1651.2, 1958.4, 2201.6)
    assert g.gpu_mhz == (114.75, 318.75, 522.75, 726.75, 930.75, 1134.75, 1300.5)
    assert g.emc_mhz == (665.6, 2133.0, 3199.0)
    mid = midpoint(g)
    assert mid == PowerMode(8, 1344.0, 726.75, 2133.0) and mid in g


@pytest.mark.parametrize("spec", SPECS.values(), ids=list(SPECS))
@pytest.mark.parametrize("grid", GRID_NAMES)
def test_every_device_grid_is_nonempty_and_inside_the_spec(spec, grid):
    g = named_grid(spec, grid)
    arr = g.array()
    assert len(arr) == g.n_modes > 0
    for dim, col in zip(("cores", "cpu_mhz", "gpu_mhz", "emc_mhz"), arr.T, strict=True):
        assert set(col.tolist()) <= set(spec.table(dim)), dim
    assert spec.validate(g.midpoint()) == g.midpoint()
    assert g.maxn() == spec.maxn() or grid == "fulcrum" and g.maxn().cores == spec.max_cores


def test_enumeration_is_fast_and_consistent():
    t0 = time.perf_counter()
    for spec in (ORIN, XAVIER):
        modes_array(spec, "full")
    assert time.perf_counter() - t0 < 0.1  # a few ms in practice
    g = named_grid(ORIN, "fulcrum")
    modes = enumerate_modes(ORIN, "fulcrum")
    assert [m.as_tuple() for m in modes] == [tuple(r) for r in g.array().tolist()]
    for i in (0, 17, 440):
        assert g.index(g.mode_at(i)) == i
    assert g.index(modes[123]) == 123


def test_neighbours_along_each_dimension():
    g = named_grid(ORIN, "fulcrum")
    mid = g.midpoint()
    lo, hi = neighbours(g, mid, "gpu_mhz")
    assert lo == PowerMode(8, 1344.0, 522.75, 2133.0) and hi == PowerMode(8, 1344.0, 930.75, 2133.0)
    lo, hi = g.neighbours(mid, "cores")
    assert (lo.cores, hi.cores) == (4, 12)
    lo, hi = neighbours(ORIN, maxn(ORIN), "emc_mhz")  # a spec means its full grid
    assert lo == PowerMode(12, 2201.6, 1300.5, 2133.0) and hi is None
    lo, hi = neighbours(ORIN, ORIN.minimum(), "cpu_mhz")
    assert lo is None and hi.cpu_mhz == 192.0
    with pytest.raises(InvalidArgument) as e:
        g.neighbours(PowerMode(8, 1344.0, 624.75, 2133.0), "gpu_mhz")
    assert e.value.field == "gpu_mhz" and "726.75" in e.value.allowed
    with pytest.raises(InvalidArgument):
        g.neighbours(mid, "fan")


def test_grid_from_a_measured_table():
    rows = [{"cores": 4, "cpu_mhz": "422.4", "gpu_mhz": 114.75, "emc_mhz": 665.6, "time_ms": 1},
            {"cores": 12, "cpu_mhz": "2201.6", "gpu_mhz": 1300.5, "emc_mhz": 3199, "time_ms": 2},
            {"cores": 4, "cpu_mhz": "2201.6", "gpu_mhz": 114.75, "emc_mhz": 665.6, "time_ms": 3}]
    g = ModeGrid.from_modes(rows)
    assert g.cores == (4, 12) and g.cpu_mhz == (422.4, 2201.6) and g.n_modes == 16
    assert not g.contains_all(ModeGrid.from_modes(rows).modes()[:3])
    fulcrum = named_grid(ORIN, "fulcrum")
    replayed = ModeGrid.from_modes(modes_array(ORIN, "fulcrum"))
    assert replayed.values("cpu_mhz") == fulcrum.cpu_mhz and replayed.midpoint() == fulcrum.midpoint()
    assert replayed.shape == (3, 7, 7, 3) and replayed.contains_all(modes_array(ORIN, "fulcrum"))
    with pytest.raises(InvalidArgument):
        ModeGrid.from_modes(np.zeros((0, 4)))
    with pytest.raises(InvalidArgument) as e:
        ModeGrid.from_modes(np.array([[2.5, 1.0, 1.0, 1.0]]))
    assert e.value.field == "cores"


def test_unknown_grid_names_allowed_values():
    with pytest.raises(InvalidArgument) as e:
        named_grid(ORIN, "random")
    assert e.value.field == "grid" and e.value.allowed == "full, powertrain, fulcrum"


# -- nvpmodel.conf -----------------------------------------------------------------------------
@pytest.mark.parametrize("fixture,device,expected", [
    ("nvpmodel_t210_jetson-nano.conf", "nano",
     {0: ("MAXN", 4, 1479.0, 921.6, 1600.0), 1: ("5W", 2, 825.6, 614.4, 1600.0)}),
    ("nvpmodel_t186_tx2.conf", "tx2-nx",
     {0: ("MAXN", 6, 2035.2, 1300.5, 1866.0), 1: ("MAXQ", 4, 1113.6, 726.75, 1331.2),
      2: ("MAXP_CORE_ALL", 6, 1267.2, 1032.75, 1600.0), 3: ("MAXP_CORE_ARM", 4, 1881.6, 1032.75, 1600.0),
      4: ("MAXP_CORE_DENVER", 2, 2035.2, 1032.75, 1600.0)}),
    ("nvpmodel_t194_xavier_agx.conf", "xavier-agx", {0: ("MAXN", 8, 2265.6, 1377.0, 2133.0)}),
    ("nvpmodel_t234_orin_agx_custom.conf", "orin-agx", {6: ("Ada", 8, 1728.0, 624.75, 2133.0)}),
])
def test_real_confs_become_valid_presets(fixture, device, expected):
    spec = SPECS[device]
    conf = load_nvpmodel(FIXTURES / fixture)
    presets = {p.id: p for p in conf.to_presets(spec)}
    assert {i: (p.name, p.cores, p.cpu_max_mhz, p.gpu_max_mhz, p.emc_max_mhz) for i, p in presets.items()} == expected
    for p in presets.values():
        assert spec.validate(p.mode()) == p.mode()


def test_conf_details():
    tx2 = load_nvpmodel(FIXTURES / "nvpmodel_t186_tx2.conf")
    assert tx2.default_id == 3 and tx2.default().name == "MAXP_CORE_ARM"
    assert set(tx2.params) == {"CPU_ONLINE", "CPU_A57", "CPU_DENVER", "GPU", "EMC"}
    assert tx2.params["GPU"].args["MAX_FREQ"].endswith("gp10b/max_freq")
    denver = tx2.model("MAXP_CORE_DENVER")
    assert denver.cpu_caps_mhz == {"CPU_A57": 345.6, "CPU_DENVER": 2035.2} and denver.cpu_max_mhz == 2035.2
    xavier = load_nvpmodel(FIXTURES / "nvpmodel_t194_xavier_agx.conf")
    assert xavier.model(0).tpc_pg_mask == 0 and xavier.model(0).emc_max_mhz is None  # EMC MAX_FREQ 0
    ada = load_nvpmodel(FIXTURES / "nvpmodel_t234_orin_agx_custom.conf").model("Ada")
    assert ada.tpc_pg_mask == 254 and ada.gpu_max_mhz == 714.0 and ada.cores_online(12) == 8
    nano = load_nvpmodel(FIXTURES / "nvpmodel_t210_jetson-nano.conf")
    assert nano.model("5W").budget_w == 5.0 and nano.model(0).budget_w is None


def test_t234_declarations_accept_their_knobs():
    params = (FIXTURES / "nvpmodel_t234_orin_params.conf").read_text()
    model = (FIXTURES / "nvpmodel_t234_orin_agx_custom.conf").read_text()
    conf = parse_nvpmodel(params + "\n" + model)
    assert "CPU_A78_2" in conf.params and conf.params["EMC"].type == "FILE"
    assert conf.to_presets(ORIN)[0].mode() == PowerMode(8, 1728.0, 624.75, 2133.0)


def test_units_khz_and_hz_are_both_read():
    text = ("< POWER_MODEL ID=0 NAME=X >\nCPU_A78_0 MAX_FREQ 1728000000\nGPU MAX_FREQ 624750\n"
            "EMC MAX_FREQ 2133000000\n")
    m = parse_nvpmodel(text).model(0)
    assert (m.cpu_max_mhz, m.gpu_max_mhz, m.emc_max_mhz) == (1728.0, 624.75, 2133.0)


@pytest.mark.parametrize("text,line,words", [
    ("< POWER_MODEL ID=0 NAME=MAXN >\nGPU MAX_FREQ\n", 2, "PARAM ARG VALUE"),
    ("< POWER_MODEL ID=0 NAME=MAXN >\n< POWER_MODEL ID=0 NAME=AGAIN >\n", 2, "defined twice"),
    ("< POWER_MODEL ID=zero NAME=MAXN >\n", 1, "not an integer"),
    ("< POWER_MODEL NAME=MAXN\n", 1, "malformed section header"),
    ("< POWER_MODEL ID=0 NAME=MAXN >\nGPU MAX_FREQ fast\n", 2, "integer frequency"),
    ("< POWER_MODEL ID=0 NAME=MAXN >\n< PM_CONFIG DEFAULT=4 >\n", 2, "names no power model"),
    ("< PARAM TYPE=CLOCK NAME=GPU >\nMAX_FREQ /sys/x\n< POWER_MODEL ID=0 NAME=M >\nEMC MAX_FREQ 0\n", 4,
     "never declared"),
    ("/sys/devices/system/cpu/cpu1/online 1\n", 1, "outside any section"),
])
def test_malformed_confs_name_file_and_line(text, line, words):
    with pytest.raises(InvalidArgument) as e:
        parse_nvpmodel(text, source="bad.conf")
    assert e.value.field == f"bad.conf:{line}" and words in str(e.value)


def test_conf_without_power_models_and_missing_file(tmp_path):
    with pytest.raises(InvalidArgument) as e:
        load_nvpmodel(FIXTURES / "nvpmodel_t234_orin_params.conf")
    assert "no < POWER_MODEL" in str(e.value)
    with pytest.raises(InvalidArgument):
        load_nvpmodel(tmp_path / "absent.conf")


def test_conf_core_count_outside_the_spec():
    only_4_or_12 = replace(ORIN, core_counts=(4, 12))
    with pytest.raises(InvalidArgument) as e:
        load_nvpmodel(FIXTURES / "nvpmodel_t234_orin_agx_custom.conf").to_presets(only_4_or_12)
    assert e.value.field.endswith("nvpmodel_t234_orin_agx_custom.conf:6") and "8 cores" in str(e.value)


# --- Orin NX, Orin Nano Super, Thor -------------------------------------------------
#: (spec, cores, table sizes, maxima, mode count, cited fixture): sources in powermodes/specs.py.
NEW_DEVICES = [
    ("orin-nx", 8, (26, 7, 4), (1984.0, 918.0, 3199.0), 5824, "nvpmodel_p3767_0000_orin_nx.conf"),
    ("orin-nano-super", 6, (22, 8, 4), (1728.0, 1020.0, 3199.0), 4224, "nvpmodel_p3767_0003_super_orin_nano.conf"),
]


@pytest.mark.parametrize(("name", "cores", "sizes", "maxima", "n_modes", "conf"), NEW_DEVICES)
def test_new_device_tables_match_the_cited_counts_and_maxima(name, cores, sizes, maxima, n_modes, conf):
    spec = SPECS[name]
    assert spec.core_counts == tuple(range(1, cores + 1))
    assert (len(spec.cpu_mhz), len(spec.gpu_mhz), len(spec.emc_mhz)) == sizes
    assert (spec.cpu_mhz[-1], spec.gpu_mhz[-1], spec.emc_mhz[-1]) == maxima
    assert spec.n_modes == n_modes == cores * sizes[0] * sizes[1] * sizes[2]
    # the A78AE cpufreq ladder: 76.8 MHz steps from 115.2 MHz
    assert spec.cpu_mhz[:3] == (115.2, 192.0, 268.8)


@pytest.mark.parametrize(("name", "cores", "sizes", "maxima", "n_modes", "conf"), NEW_DEVICES)
def test_new_device_presets_are_those_of_the_real_nvpmodel_conf(name, cores, sizes, maxima, n_modes, conf):
    spec = SPECS[name]
    parsed = load_nvpmodel(FIXTURES / conf)
    assert parsed.to_presets(spec) == spec.presets
    assert [p.name for p in spec.presets] == [m.name for m in parsed.power_models]


def test_orin_nx_and_nano_super_preset_caps():
    nx, ns = SPECS["orin-nx"], SPECS["orin-nano-super"]
    assert nx.preset("10W").mode() == PowerMode(4, 1190.4, 612.0, 2133.0)
    assert nx.preset("25W").mode() == PowerMode(8, 1497.6, 408.0, 3199.0)
    assert ns.preset("MAXN_SUPER").mode() == ns.maxn() == PowerMode(6, 1728.0, 1020.0, 3199.0)
    assert ns.preset("25W").mode() == PowerMode(6, 1344.0, 918.0, 3199.0)
    assert ns.preset("15W").budget_w == 15.0 and ns.preset("MAXN_SUPER").budget_w is None


def test_thor_has_no_invented_tables():
    with pytest.raises(InvalidArgument, match="not published"):
        get_spec("thor")
    assert "thor" not in SPECS


def test_a_conf_for_a_bigger_board_names_the_core_it_cannot_have():
    with pytest.raises(InvalidArgument, match="CORE_7, but orin-nano-super has 6 CPUs"):
        load_nvpmodel(FIXTURES / "nvpmodel_p3767_0000_orin_nx.conf").to_presets(SPECS["orin-nano-super"])
