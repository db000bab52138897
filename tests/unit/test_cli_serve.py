"""``edgetune serve``: dispatch to a service's ``main``, help, and clear refusals (exit 2)."""

from __future__ import annotations

from click.testing import CliRunner

from edgetune.cli import cli, main
from edgetune.cli.serve import SERVICES


def test_services_not_yet_available_exit_2_with_a_message(capsys):
    for name in ("estimator", "optimizer", "coordinator"):
        if SERVICES[name] is not None:
            continue
        assert main(["serve", name, "--port", "0"]) == 2
        err = capsys.readouterr().err
        assert f"the {name} service is not available yet" in err and "profiler" in err


def test_unknown_service_is_a_usage_error():
    result = CliRunner().invoke(cli, ["serve", "teleporter"])
    assert result.exit_code == 2 and "unknown service 'teleporter'" in result.output


def test_help_of_serve_and_of_the_profiler():
    runner = CliRunner()
    top = runner.invoke(cli, ["serve", "--help"])
    assert top.exit_code == 0 and "profiler, estimator, optimizer or coordinator" in top.output
    profiler = runner.invoke(cli, ["serve", "profiler", "--help"])
    assert profiler.exit_code == 0
    for flag in ("--device", "--port", "--redis", "--state-dir", "--metrics-port", "--host"):
        assert flag in profiler.output


def test_profiler_refuses_a_bad_device_with_exit_2(tmp_path):
    result = CliRunner().invoke(cli, ["serve", "profiler", "--device", "sim:cray-1", "--port", "0",
                                      "--metrics-port", "0", "--redis", "none", "--state-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "device: unknown simulated device 'cray-1'" in result.output


def test_profiler_refuses_a_bad_flag_with_exit_2():
    result = CliRunner().invoke(cli, ["serve", "profiler", "--no-such-flag"])
    assert result.exit_code == 2 and "unrecognized arguments: --no-such-flag" in result.output
