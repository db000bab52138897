"""``edgetune job``: the job file (schema, semantic checks), its conversion to and from the
``TuningJobSpec`` record, the CLI's JSON of a job, progress lines, exit codes that need no server
(the server side: tests/integration/test_up_jobs.py; the wire: tests/unit/test_serde_tuning.py)."""

import io
import json
import socket

import pytest
import yaml
from click.testing import CliRunner

from edgetune.base.objective import Objective
from edgetune.cli import main
from edgetune.cli.job import follow
from edgetune.errors import InvalidArgument
from edgetune.tuning.jobfile import load_job_file, spec_from_doc, spec_to_doc
from edgetune.tuning.jobs import (
    JobPhase,
    NodePhase,
    NodeStatus,
    TuningEvent,
    TuningJobSpec,
    TuningJobStatus,
    TuningJobView,
    TuningMethod,
)

ISSUE_EXAMPLE = """\
name: mnv3-train
workload: {name: mobilenetv3, role: train, batch_sizes: [16]}
nodes: [orin-agx-1, nano-1]          # or  selector: {device: orin-agx}
objective: min-time                  # or  min-energy (with time_budget_ms)
power_budget_w: {orin-agx-1: 25, nano-1: 7}   # or one number; absent: registered budgets
risk: 0.05
profiles: 50
"""


def write(tmp_path, text, name="job.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_issue_example_converts(tmp_path):
    spec = load_job_file(write(tmp_path, ISSUE_EXAMPLE))
    assert spec.name == "mnv3-train"
    assert spec.workload == "mobilenetv3" and spec.role == "train"
    assert spec.batch_sizes == (16,)
    assert spec.nodes == ("orin-agx-1", "nano-1")
    assert spec.objective == Objective.MIN_TIME
    assert dict(spec.node_power_budget_w) == {"orin-agx-1": 25.0, "nano-1": 7.0}
    assert spec.power_budget_w is None
    assert spec.risk == 0.05 and spec.profiles == 50
    assert spec.method == TuningMethod.FRONTIER
    assert spec.check() == spec  # what the coordinator accepts


@pytest.mark.parametrize("doc", [
    yaml.safe_load(ISSUE_EXAMPLE),
    {"name": "e", "workload": {"name": "resnet18", "role": "infer"}, "selector": {"device": "nano", "labels": {"a": "b"}},
     "objective": "min-energy", "time_budget_ms": 250.0, "power_budget_w": 9.5, "method": "random",
     "reference_model": "ref-orin-train", "profiles": 12},
])
def test_spec_round_trip(doc):
    spec = spec_from_doc(doc)
    again = spec_from_doc(spec_to_doc(spec))
    assert again == spec
    assert spec_to_doc(again) == spec_to_doc(spec)


def test_one_batch_size_is_a_list_of_one():
    spec = spec_from_doc({"name": "a", "workload": {"name": "lstm", "batch_sizes": 32}, "nodes": ["n-1"]})
    assert spec.batch_sizes == (32,) and spec.role == "train"


@pytest.mark.parametrize(("doc", "field", "allowed"), [
    ({"name": "a", "workload": {"name": "x"}, "nodes": ["n"], "powr_budget_w": 5}, "job:powr_budget_w", "power_budget_w"),
    ({"name": "a", "workload": {"name": "x", "batch": 3}, "nodes": ["n"]}, "job:workload.batch", "batch_sizes"),
    ({"name": "a", "workload": {"name": "x"}, "selector": {"model": "nano"}}, "job:selector.model", "device, labels"),
])
def test_unknown_key_named_with_allowed_keys(doc, field, allowed):
    with pytest.raises(InvalidArgument) as err:
        spec_from_doc(doc)
    assert err.value.field == field
    assert "unknown key" in err.value.message and allowed in (err.value.allowed or "")


@pytest.mark.parametrize(("doc", "field"), [
    ({"workload": {"name": "x"}, "nodes": ["n"]}, "job:name"),
    ({"name": "Not_A_Label", "workload": {"name": "x"}, "nodes": ["n"]}, "job:name"),
    ({"name": "a", "workload": {"name": "x"}}, "job:nodes"),
    ({"name": "a", "workload": {"name": "x"}, "nodes": ["n"], "selector": {"device": "nano"}}, "job:nodes"),
    ({"name": "a", "workload": {"name": "x"}, "nodes": ["n", "n"]}, "job:nodes[1]"),
    ({"name": "a", "workload": {"name": "x"}, "nodes": ["n"], "objective": "min-energy"}, "job:time_budget_ms"),
    ({"name": "a", "workload": {"name": "x"}, "nodes": ["n"], "objective": "fastest"}, "job:objective"),
    ({"name": "a", "workload": {"name": "x"}, "nodes": ["n"], "risk": 0.7}, "job:risk"),
    ({"name": "a", "workload": {"name": "x"}, "nodes": ["n"], "risk": 0}, "job:risk"),
    ({"name": "a", "workload": {"name": "x"}, "nodes": ["n"], "power_budget_w": 0}, "job:power_budget_w"),
    ({"name": "a", "workload": {"name": "x"}, "nodes": ["n"], "power_budget_w": {"n": -1}}, "job:power_budget_w.n"),
    ({"name": "a", "workload": {"name": "x", "batch_sizes": [8, 8]}, "nodes": ["n"]}, "job:workload.batch_sizes[1]"),
    ({"name": "a", "workload": {"name": "x"}, "nodes": ["n"], "profiles": 0}, "job:profiles"),
])
def test_bad_values_named(doc, field):
    with pytest.raises(InvalidArgument) as err:
        spec_from_doc(doc)
    assert err.value.field == field


def test_submit_unknown_key_exits_2_before_connecting(tmp_path, capsys):
    path = write(tmp_path, ISSUE_EXAMPLE.replace("risk:", "rsik:"))
    # No coordinator listens there: exit 2 shows the file was refused before any call.
    code = main(["job", "submit", str(path), "--coordinator", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2
    assert "job.yaml:rsik" in err and "unknown key 'rsik'" in err and "risk" in err and "profiles" in err


def test_not_yaml_exits_2(tmp_path, capsys):
    code = main(["job", "submit", str(write(tmp_path, "name: [a\n")), "--coordinator", "127.0.0.1:1"])
    assert code == 2 and "is not YAML" in capsys.readouterr().err


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_coordinator_exits_1_naming_it(tmp_path):
    address = f"127.0.0.1:{_closed_port()}"
    r = CliRunner().invoke(main_group(), ["job", "get", "x", "--coordinator", address])
    assert r.exit_code == 1
    assert f"coordinator {address} unavailable" in r.output


def main_group():
    from edgetune.cli import cli
    return cli


def tuning_job(nano: NodePhase = NodePhase.PROFILING, nano_profiled: int = 3, cancelled: bool = False
               ) -> TuningJobView:
    """A job of two nodes: orin-agx-1 Applied with its choice, nano-1 in ``nano``."""
    done = NodeStatus("orin-agx-1", "orin-agx", NodePhase.APPLIED, profiled=12, mode=(8.0, 1728.0, 624.75, 3199.0),
                      batch_size=16, power_budget_w=25.0, predicted_time_ms=101.5, predicted_power_w=21.0,
                      predicted_power_upper_w=23.5, measured_time_ms=99.0, measured_power_w=20.5,
                      events=(TuningEvent(1.0, "applied revision 1"),))
    nano_1 = NodeStatus("nano-1", "nano", nano, profiled=nano_profiled)
    spec = TuningJobSpec("mnv3-train", "mobilenetv3", nodes=("orin-agx-1", "nano-1"), profiles=12,
                         cancelled=cancelled)
    return TuningJobView(spec, TuningJobStatus("mnv3-train", {"orin-agx-1": done, "nano-1": nano_1}), revision=7)


def test_json_shape_exact():
    assert tuning_job().to_json() == {
        "name": "mnv3-train", "phase": "Running",
        "nodes": [
            {"id": "orin-agx-1", "device": "orin-agx", "phase": "Applied",
             "mode": {"cores": 8, "cpu_mhz": 1728.0, "gpu_mhz": 624.75, "emc_mhz": 3199.0},
             "batch_size": 16, "power_budget_w": 25.0, "profiled": 12,
             "predicted": {"time_ms": 101.5, "power_w": 21.0, "power_upper_w": 23.5},
             "measured": {"time_ms": 99.0, "power_w": 20.5}, "reason": ""},
            {"id": "nano-1", "device": "nano", "phase": "Profiling", "mode": None, "batch_size": None,
             "power_budget_w": None, "profiled": 3,
             "predicted": {"time_ms": None, "power_w": None, "power_upper_w": None},
             "measured": {"time_ms": None, "power_w": None}, "reason": ""},
        ],
    }
    assert json.dumps(tuning_job().to_json()).count('"cores": 8,') == 1  # an int, as the CLI always printed it


@pytest.mark.parametrize(("job", "name"), [(tuning_job(NodePhase.APPLIED), "Succeeded"),
                                           (tuning_job(NodePhase.FAILED), "Failed"),
                                           (tuning_job(cancelled=True), "Cancelled"),
                                           (tuning_job(NodePhase.PENDING), "Running"),
                                           (TuningJobView(TuningJobSpec("j", "x", nodes=("a",)), None, 1), "Pending")])
def test_job_phases(job, name):
    assert job.phase == name and job.phase.done == (name not in ("Pending", "Running"))


def test_follow_off_tty_prints_a_line_per_node_change():
    first = tuning_job()
    second = tuning_job(nano_profiled=4)  # only nano-1 changes
    third = tuning_job(NodePhase.APPLIED, nano_profiled=4)
    out = io.StringIO()
    last = follow(iter([first, second, third]), stream=out)
    lines = out.getvalue().splitlines()
    assert last is third
    assert lines[0].startswith("mnv3-train orin-agx-1: Applied 12/12 mode 8c/1728/624.75/3199 bs=16")
    assert "measured 20.5 W / budget 25 W" in lines[0]
    assert lines[1] == "mnv3-train nano-1: Profiling 3/12"
    assert lines[2] == "mnv3-train: Running"
    assert lines[3] == "mnv3-train nano-1: Profiling 4/12"
    assert lines[4] == "mnv3-train nano-1: Applied 4/12"
    assert lines[5] == "mnv3-train: Succeeded"
    assert len(lines) == 6


def test_job_json_is_json_serialisable():
    json.dumps(tuning_job().to_json())


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_follow_on_a_terminal_draws_a_table():
    done = tuning_job(NodePhase.APPLIED)
    assert done.phase == JobPhase.SUCCEEDED
    out = _Terminal()
    assert follow(iter([tuning_job(), done]), stream=out) is done
    text = out.getvalue()
    assert "job mnv3-train: Succeeded" in text and "orin-agx-1" in text and "nano-1" in text and "Profiling" in text


def test_method_cap_search_parses_and_round_trips():
    doc = {**yaml.safe_load(ISSUE_EXAMPLE), "method": "cap-search", "workload": {"name": "mobilenetv3",
                                                                              "batch_sizes": [32, 16, 8]}}
    spec = spec_from_doc(doc)
    assert spec.method == TuningMethod.CAP_SEARCH
    assert spec_to_doc(spec)["method"] == "cap-search" and spec_from_doc(spec_to_doc(spec)) == spec


def test_bad_method_names_the_allowed_values():
    with pytest.raises(InvalidArgument) as err:
        spec_from_doc({"name": "a", "workload": {"name": "x"}, "nodes": ["n"], "method": "cap_search"})
    assert err.value.field == "job:method"
    assert all(f"'{m}'" in str(err.value) for m in ("frontier", "random", "cap-search"))
