"""The root of the tests: pytest puts this directory on ``sys.path`` (it holds a conftest.py), so
every suite imports the shared helpers as ``harness`` (servers and Redis started and stopped).

It also decides how ``make test`` (``-n 3 --dist loadgroup --no-loadscope-reorder``) spreads the
suite over its workers. xdist hands out *units*, in the order the tests are collected:

- a test module is one unit (its module fixtures and caches are built once, on one worker; its
  tests never run beside each other), except the process-level integration tests, each its own
  unit unless it shares a module fixture (the demo run);
- tests that share a costly session fixture, across modules, are one unit (:data:`SESSION_GROUPS`:
  one local Ray per run, not one per worker);
- units run longest first (:data:`EXPECTED_S`, seconds measured on a loaded two-core machine;
  any other test counts :data:`DEFAULT_S`), so the workers finish together instead of one
  running the last long test alone. A stale figure only costs balance, never a result.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Fixtures that several modules share for the whole run: every test using one is a unit together.
SESSION_GROUPS = {"local_ray": "ray"}

#: Where tests are split one per unit (unless they share a module fixture).
SPLIT_DIRS = ("tests/integration/",)

DEFAULT_S = 0.35
#: Expected seconds of the slow tests (``path::name``, parameters left out), for the order only.
EXPECTED_S: dict[str, float] = {
    "tests/integration/test_walkthrough.py::test_the_walkthrough_runs_as_written": 110,
    "tests/integration/test_flower.py::test_flower_rounds_run_in_the_planned_modes": 45,
    "tests/integration/test_flower.py::test_the_strategy_plans_rounds_from_the_tuning_jobs_verified_choices": 15,
    "tests/integration/test_demo.py::test_demo_exits_zero_and_writes_the_report": 60,
    "tests/integration/test_demo.py::test_ctrl_c_reports_what_was_written_not_a_report_that_never_was": 10,
    "tests/integration/test_crash_consistency.py::test_a_coordinator_killed_around_each_write_leaves_registry_configs_round_and_agents_agreeing": 65,
    "tests/integration/test_crash_consistency.py::test_after_redis_restarts_with_or_without_its_data_registry_configs_and_agents_agree": 30,
    "tests/integration/test_experiment_batch_efficiency.py::test_batch_efficiency_script_reports_every_bench_of_its_models": 30,
    "tests/integration/test_tuning_jobs_e2e.py::test_leader_killed_mid_job_standby_finishes": 42,
    "tests/integration/test_tuning_jobs_e2e.py::test_job_reaches_applied_within_budget": 25,
    "tests/integration/test_up_jobs.py::test_job_submit_wait_json_get_list_refusals_then_unavailable": 25,
    "tests/integration/test_up_jobs.py::test_child_failing_at_start_exits_nonzero_and_cleans_up": 4,
    "tests/integration/test_user_workload_job.py::test_a_user_model_is_tuned_by_a_job_and_a_bad_one_fails_naming_it": 18,
    "tests/integration/test_end_to_end.py::test_profile_plan_push_and_replan": 8,
    "tests/integration/test_tuning_faults.py::test_redis_restart_and_a_killed_agent_mid_job": 26,
    "tests/integration/test_mode_restore.py::test_sigterm_mid_profile_exits_within_the_grace_and_puts_every_file_back": 26,
    "tests/integration/test_coordinator_faults.py::test_edgetune_serve_coordinator_releases_the_lease_on_sigterm": 10,
    "tests/integration/test_coordinator_faults.py::test_standby_takes_over_within_one_lease_after_the_leader_is_killed": 8,
    "tests/integration/test_node_client.py::test_register_plan_then_read_and_watch_the_config": 8,
    "tests/deployment/test_chart.py::test_checkov_findings_are_all_justified": 15,
    "tests/unit/test_cli_tune.py::test_tune_profiles_the_front_and_its_budget_choices_hold_on_the_device": 42,
    "tests/unit/test_cli_tune.py::test_tune_single_budget_prints_one_answer_for_people_and_as_json": 13,
    "tests/service/test_estimator_service.py::test_ray_fit_equals_sequential_fit": 36,
    "tests/unit/test_proxy_text.py::test_fine_tuning_the_checkpoint_raises_held_out_accuracy": 23,
    "tests/unit/test_proxy_text.py::test_vocabulary_is_the_papers_and_one_for_all_sets": 12,
    "tests/unit/test_online.py::test_user_cnn_within_budget_and_10_percent_of_the_best_mode": 21,
    "tests/unit/test_references.py::test_transfer_from_a_shipped_reference": 16,
    "tests/unit/test_references.py::test_the_library_estimator_transfers_from_a_shipped_reference_by_name": 7,
    "tests/unit/test_batch_efficiency.py::test_fresh_head_reinitialises_only_the_classifier_layer_the_same_way_every_time": 8,
    "tests/unit/test_cli_user_workload.py::test_tune_a_user_model_profiles_transfers_selects_and_verifies": 15,
    "tests/unit/test_parallel.py::test_sequential_and_ray_give_identical_seeded_results": 15,
    "tests/unit/test_dynamic.py::test_als_reuses_its_samples_and_extends_without_a_random_phase": 15,
    "tests/unit/test_prior.py::test_the_90_percent_interval_covers_about_90_percent_of_held_out_rows": 14,
    "tests/unit/test_flower_client.py::test_rounds_profile_in_place_then_run_the_choice_and_feed_the_planner": 15,
    "tests/service/test_tuning_policy.py::test_the_verification_retry_limit_of_the_policy_governs_tune_and_the_demo": 20,
    "tests/service/test_tuning_policy.py::test_the_demo_tuning_path_follows_the_policy_retry_limit": 10,
    "tests/service/test_tuning_policy.py::test_the_demo_tuning_path_follows_the_policy_risk": 8,
    "tests/service/test_reconcile_drift.py::test_a_hotter_slower_board_is_re_tuned_within_its_budget": 8,
    "tests/unit/test_estimation.py::test_nn_gp_cv_calibration_covers_held_out_residuals_better": 8,
}


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _expected_s(item: pytest.Item) -> float:
    name = getattr(item, "originalname", item.name)
    return EXPECTED_S.get(f"{_module(item)}::{name}", DEFAULT_S)


def _shares_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a module- or session-scoped fixture defined in its own module."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    module = getattr(item, "module", None)
    for defs in info.name2fixturedefs.values():
        for d in defs:
            if d.scope in ("module", "session") and module is not None and \
                    getattr(d.func, "__module__", None) == module.__name__:
                return True
    return False


def _unit(item: pytest.Item) -> str:
    """The test's unit: a session group, the test itself (its node id) or its module (``unit/test_x``)."""
    for fixture, group in SESSION_GROUPS.items():
        if fixture in getattr(item, "fixturenames", ()):
            return group
    module = _module(item)
    if module.startswith(SPLIT_DIRS) and not _shares_module_fixture(item):
        return item.nodeid
    return module.removeprefix("tests/").removesuffix(".py")


def _join_group(item: pytest.Item, group: str) -> None:
    """What ``--dist loadgroup`` does to a test marked ``xdist_group(group)``: ``@group`` appended to
    its node id, which the controller's scheduler reads as the test's unit. Done here because
    pytest-xdist 3.8 sets ``item._nodeid``, which pytest 9 no longer reads (its node id is ``_id``):
    with these pins an ``xdist_group`` mark groups nothing."""
    suffixed = f"{item.nodeid}@{group}"
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId  # pytest 9's node id type

        item._id = NodeId.parse(suffixed)
    else:
        item._nodeid = suffixed


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("loadgroup", default=False):  # set on the workers of --dist loadgroup
        return
    units: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        units[_unit(item)].append(item)
    for name, members in units.items():
        if len(members) > 1 or name != members[0].nodeid:  # a lone split test is a unit as it is
            for item in members:
                _join_group(item, name)
    order = sorted(units, key=lambda name: -sum(_expected_s(i) for i in units[name]))  # stable: ties keep order
    items[:] = [item for name in order for item in units[name]]


# --- one local Ray ---------------------------------------------------------------------------------
_ray_started_here = False


@pytest.fixture
def local_ray():
    """A 2-CPU local Ray (the test machine's cores are shared), started by the first test that asks and
    kept for the tests after it that ask too (one unit on one worker: :data:`SESSION_GROUPS`); stopped
    after the last of them (:func:`pytest_runtest_teardown`), so a test that starts its own Ray (the
    Flower engine) never finds one running."""
    global _ray_started_here
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        from edgetune.estimation.parallel import init_local_ray  # defers ray

        init_local_ray(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        _ray_started_here = True
    return ray


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    global _ray_started_here
    if _ray_started_here and (nextitem is None or "local_ray" not in getattr(nextitem, "fixturenames", ())):
        import ray  # started above: already imported

        ray.shutdown()
        _ray_started_here = False


# --- work done once per run ---------------------------------------------------------------------------
# edgetune.estimation.proxy.CHECKPOINT_DIR_ENV, spelled out: importing it would import torch into every
# run (tests/unit/test_proxy_checkpoints.py checks the two agree)
CHECKPOINT_DIR_ENV = "EDGETUNE_CHECKPOINT_DIR"


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A directory every worker of this run shares (for what one computes and the other reads)."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if worker_id != "master" else base) / "shared"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session", autouse=True)
def _checkpoints_once_per_run(run_dir: Path) -> Iterator[None]:
    """The proxy workloads' pre-trained checkpoints (tens of CPU seconds each) trained once per run:
    ``$EDGETUNE_CHECKPOINT_DIR`` in the run's shared directory, read by the other worker and by the
    services the tests start as processes. A directory set from outside (a CI cache) is kept."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CHECKPOINT_DIR_ENV, os.environ.get(CHECKPOINT_DIR_ENV) or str(run_dir / "checkpoints"))
        yield


@pytest.fixture(autouse=True)
def _root_log_handlers_restored() -> Iterator[None]:
    """The root logger's handlers as they were before each test: a CLI run in-process (CliRunner, capsys)
    may attach one to a stream that is closed once the test ends, and a later test's log records would
    then print "--- Logging error ---" into its output."""
    before = list(logging.root.handlers)
    yield
    logging.root.handlers[:] = before


@pytest.fixture(autouse=True)
def _stop_signal_handlers_restored() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP handled as before each test (in the main thread, where handlers live): a
    handler a test's code installed and left (an in-process `up`, a tuner not closed) would otherwise take
    a later test's signal, as once a SIGINT meant to become KeyboardInterrupt in ``test_online``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for sig, handler in before.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
