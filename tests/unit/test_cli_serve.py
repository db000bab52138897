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


def test_profiler_takes_its_budget_as_power_budget_and_refuses_a_sweep():
    from edgetune.services.profiler.server import parse_args

    assert parse_args(["--power-budget", "25"]).power_budget_w == 25.0
    assert parse_args(["--power-budget-w", "20"]).power_budget_w == 20.0
    assert parse_args([]).power_budget_w == 0.0  # none registered
    result = CliRunner().invoke(cli, ["serve", "profiler", "--power-budget", "17:50"])
    assert result.exit_code == 2
    assert "--power-budget: '17:50': a node registers one power budget in W" in result.output


def test_an_exposed_unauthenticated_service_or_a_bad_token_file_exits_2(tmp_path):
    exposed = CliRunner().invoke(cli, ["serve", "optimizer", "--host", "0.0.0.0", "--port", "0", "--metrics-port", "0"])
    assert exposed.exit_code == 2 and "--host: '0.0.0.0' would expose" in exposed.output and "--insecure" in exposed.output
    bad = tmp_path / "tokens.yaml"
    bad.write_text("tokens: [{token: short, role: admin, name: x}]\n")
    bad.chmod(0o600)
    refused = CliRunner().invoke(cli, ["serve", "optimizer", "--port", "0", "--metrics-port", "0",
                                       "--auth-tokens", str(bad)])
    assert refused.exit_code == 2 and "tokens[0].token: is 5 characters long" in refused.output
    half = CliRunner().invoke(cli, ["serve", "optimizer", "--port", "0", "--metrics-port", "0",
                                    "--tls-cert", str(bad)])
    assert half.exit_code == 2 and "--tls-key" in half.output
