"""The explicit package list in pyproject.toml must cover every package folder."""

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _packages_on_disk() -> set[str]:
    found = set()
    for base, prefix in ((ROOT / "libs" / "edgetune", "edgetune"), (ROOT / "services", "edgetune.services")):
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if "__pycache__" in rel.parts:
                continue
            found.add(".".join((prefix, *rel.parts)) if rel.parts else prefix)
    return found


def test_every_package_folder_is_listed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    missing = _packages_on_disk() - listed
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
    stale = listed - _packages_on_disk()
    assert not stale, f"listed but not on disk: {sorted(stale)}"


def test_console_script_and_services_import():
    import edgetune.cli
    import edgetune.services

    assert callable(edgetune.cli.main)
    assert pathlib.Path(edgetune.services.__file__).parent == ROOT / "services"


def test_cli_exit_codes_pass_through():
    import click

    from edgetune import cli

    @click.command("exit-two")
    def exit_two() -> None:
        raise click.exceptions.Exit(2)

    cli.cli.add_command(exit_two)
    try:
        assert cli.main(["exit-two"]) == 2
        assert cli.main(["--version"]) == 0
        assert cli.main(["modes", "--device", "no-such-device"]) == 2
    finally:
        cli.cli.commands.pop("exit-two")
