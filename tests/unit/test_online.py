"""The online tuner (edgetune.online): windows measured from the user's steps, the shared
workflow's choice kept, the original mode restored on exit, exception and signal."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import torch
from torch import nn

from edgetune.base.mode import PowerMode
from edgetune.devices.simulated.device import SimulatedJetson
from edgetune.errors import InvalidArgument
from edgetune.online import OnlineTuner, State, Window, simulated_reference, split_profiles
from edgetune.powermodes.grids import named_grid
from edgetune.store.memory import MemoryStore
from edgetune.tuning.policy import TuningPolicy
from tests.fixtures.workloads.sensor_cnn import SensorCNN, make_batches

BATCH = 16


#: A model outside the zoo: the tests' sensor CNN at ``make_wide``'s width over 256-sample windows, whose
#: fastest modes draw more than 20 W on the simulated Orin AGX (so the acceptance budget binds).
WIDTH, WINDOW = 104, 256
make_batch = make_batches(window=WINDOW)


@pytest.fixture(scope="module")
def quick_reference():
    return simulated_reference("orin-agx", "train", epochs=20)


def _loop(tuner: OnlineTuner, n_steps: int, model: nn.Module | None = None, fail_at: int | None = None,
          train_every: int = 1) -> None:
    """The user's loop; ``train_every``: really train one step in so many (the simulator times them all)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01) if model is not None else None
    for step in range(n_steps):
        with tuner.step(batch_size=BATCH):
            if step == fail_at:
                raise RuntimeError("the user's step failed")
            if model is not None and opt is not None and step % train_every == 0:
                x, y = make_batch(BATCH)
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()


def test_split_profiles_spends_exactly_the_profiles() -> None:
    base = TuningPolicy()
    for n in (1, 7, 10, 20, 23, 50):
        p = split_profiles(n, base)
        assert p.profiles == n
    assert (split_profiles(20, base).n_initial, split_profiles(20, base).rounds) == (10, 2)
    with pytest.raises(InvalidArgument):
        split_profiles(0, base)


def test_bad_arguments_are_refused_before_anything_changes(tmp_path) -> None:
    dev = SimulatedJetson("orin-agx")
    with pytest.raises(InvalidArgument) as exc:
        OnlineTuner(dev, "mobilenetv3", power_budget_w=-1.0)
    assert exc.value.field == "power_budget_w"
    with pytest.raises(InvalidArgument) as exc:
        OnlineTuner("sim:nope", "mobilenetv3", power_budget_w=20.0)
    assert exc.value.field == "device"
    with pytest.raises(InvalidArgument) as exc:
        OnlineTuner(dev, object(), power_budget_w=20.0)
    assert exc.value.field == "model"
    with pytest.raises(InvalidArgument) as exc:
        OnlineTuner(dev, "mobilenetv3", power_budget_w=20.0, steps_per_profile=0)
    assert exc.value.field == "steps_per_profile"
    assert dev.current_mode() == dev.spec.maxn()


def test_windows_switch_modes_while_training_and_land_in_the_store(quick_reference) -> None:
    dev = SimulatedJetson("orin-agx", seed=3)
    store = MemoryStore()
    original = dev.current_mode()
    seen = []
    with OnlineTuner(dev, "mobilenetv3", power_budget_w=25.0, profiles=12, steps_per_profile=5, seed=1,
                     reference=quick_reference, store=store, node_id="orin-1", on_window=seen.append) as tuner:
        _loop(tuner, 100)  # ~3 s of the device's clock a window: the first few, before any transfer
        trace = tuner.trace()
        assert tuner.state in (State.PROFILING, State.SELECTING)
        assert dev.current_mode() != original  # training goes on in the window's mode
    assert tuner.state is State.DONE and dev.current_mode() == original
    assert len(trace) == 100 and all(r.time_ms > 0 for r in trace)
    windows = tuner.windows
    assert len(windows) >= 3 and windows == seen
    assert len({w.mode for w in windows}) == len(windows)  # one mode per window
    for w in windows:
        assert w.steps >= 5 and w.purpose == "profile" and w.batch_size == BATCH
        truth_t = dev.true_time_ms(w.mode, "mobilenetv3", "train", BATCH)
        truth_p = dev.true_power_w(w.mode, "mobilenetv3", "train", BATCH)
        assert abs(w.time_ms / truth_t - 1) < 0.1  # the steps measured are the window's mode's
        assert abs(w.power_w / truth_p - 1) < 0.1  # settled before measuring
    stored = store.get_measurements("orin-agx", "mobilenetv3", "train", "orin-1")
    assert sorted((m.mode, round(m.power_w, 6)) for m in stored) == sorted(
        (w.mode, round(w.power_w, 6)) for w in windows)
    assert all(m.extra["source"] == "online" for m in stored)
    d = tuner.decision()
    assert d["mode"] is None and d["profiled"] == len(windows) and d["state"] == "DONE"


def test_exception_in_the_loop_restores_the_original_mode(quick_reference) -> None:
    dev = SimulatedJetson("orin-agx")
    start = PowerMode(8, 1497.6, 828.75, 2133.0)
    dev.apply(start)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(RuntimeError, match="the user's step failed"):
        with OnlineTuner(dev, "mobilenetv3", power_budget_w=20.0, reference=quick_reference) as tuner:
            _loop(tuner, 200, fail_at=120)
    assert tuner.windows and any(w.mode != start for w in tuner.windows)  # it had switched away
    assert dev.current_mode() == start
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert tuner.state is State.DONE


def test_signal_restores_the_mode_before_the_previous_handler_runs(quick_reference) -> None:
    dev = SimulatedJetson("orin-agx")
    start = dev.current_mode()
    modes_when_called = []

    def previous(signum, frame):
        modes_when_called.append(dev.current_mode())
        raise SystemExit(signum)

    old = signal.signal(signal.SIGTERM, previous)
    try:
        with pytest.raises(SystemExit):
            with OnlineTuner(dev, "mobilenetv3", power_budget_w=20.0, reference=quick_reference) as tuner:
                for step in range(400):
                    with tuner.step(batch_size=BATCH):
                        if step == 100:
                            assert dev.current_mode() != start
                            os.kill(os.getpid(), signal.SIGTERM)
        assert modes_when_called == [start]  # restored first
        assert dev.current_mode() == start and tuner.state is State.DONE
        assert signal.getsignal(signal.SIGTERM) is previous  # the tuner's handler is gone
    finally:
        signal.signal(signal.SIGTERM, old)


def test_default_sigint_becomes_keyboard_interrupt_after_restoring(quick_reference) -> None:
    dev = SimulatedJetson("orin-agx")
    start = dev.current_mode()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, whatever ran before in this worker
    with pytest.raises(KeyboardInterrupt):
        with OnlineTuner(dev, "mobilenetv3", power_budget_w=20.0, reference=quick_reference) as tuner:
            for step in range(400):
                with tuner.step(batch_size=BATCH):
                    if step == 80:
                        os.kill(os.getpid(), signal.SIGINT)
    assert dev.current_mode() == start


def test_user_cnn_within_budget_and_10_percent_of_the_best_mode(quick_reference) -> None:
    """Acceptance: simulated Orin AGX, 20 W, 20 profiles, a model outside the zoo."""
    torch.manual_seed(0)
    model = SensorCNN(WIDTH)
    dev = SimulatedJetson("orin-agx", seed=0)
    with OnlineTuner(dev, model, power_budget_w=20.0, profiles=20, steps_per_profile=5, seed=0,
                     reference=quick_reference) as tuner:
        _loop(tuner, 30_000, model, train_every=500)  # ~3 ms steps: ~1,000 a window (2.5 s settling)
        d = tuner.decision()
        assert tuner.state is State.STEADY
    wid = d["workload"]
    assert wid.startswith("SensorCNN-")
    assert d["feasible"] and 10 <= d["profiled"] <= 20 and d["measured"]["power_w"] <= 20.0  # 20 is a budget: verification may settle sooner
    mode = PowerMode(**d["mode"])
    grid = named_grid(dev.spec, "full").array()
    true_t = dev.true_time_ms(grid, wid, "train", BATCH)
    true_p = dev.true_power_w(grid, wid, "train", BATCH)
    best = float(true_t[true_p <= 20.0].min())
    # measured within budget; its noise-free power within issue 27's tolerance (a choice measured once with
    # 1.5 % noise at the budget's edge can sit a few mW over it: 20.017 W here)
    assert dev.true_power_w(mode, wid, "train", BATCH) <= 20.0 + 0.5
    assert dev.true_time_ms(mode, wid, "train", BATCH) <= 1.10 * best
    assert np.isfinite(d["predicted"]["time_ms"]) and d["steady"]["steps"] > 1000
    assert d["measured"]["time_ms"] <= 1.10 * best


def _windows(dev: SimulatedJetson, reference, n_steps: int, **kw) -> list:
    with OnlineTuner(dev, "mobilenetv3", power_budget_w=25.0, profiles=12, steps_per_profile=5, seed=1,
                     reference=reference, **kw) as tuner:
        _loop(tuner, n_steps)
    return tuner.windows


def test_a_window_measures_once_power_has_settled_bounded_by_settle_s(quick_reference) -> None:
    """Settle-then-measure on the simulator's virtual clock (nothing sleeps): a window waits for the
    settle rule on its own power samples, not a fixed time, and never longer than ``settle_s``."""
    # no transient on this board: the rule holds at its first chance (two 0.3 s windows), far below settle_s
    flat = _windows(SimulatedJetson("orin-agx", seed=3, settle_s=0.0), quick_reference, 300)
    profiles = [w for w in flat if w.purpose == "profile"]
    assert len(profiles) >= 4
    assert all(0.3 - 1e-6 <= w.settle_s < 1.0 for w in profiles)
    # a verification's one measurement decides: it waits for the expected step's tail, at most twice settle_s
    assert all(w.settle_s <= 5.0 + 1.5 * w.time_ms / 1000 for w in flat if w.purpose == "verify")
    # power follows a switch over ~2.5 s (time constant 0.625 s): the window waits for it, within the bound
    lagging = [w for w in _windows(SimulatedJetson("orin-agx", seed=3, settle_s=2.5), quick_reference, 300)
               if w.purpose == "profile"]
    assert len(lagging) >= 4
    assert all(w.settle_s <= 2.5 + 1.5 * w.time_ms / 1000 for w in lagging)  # checked between steps
    assert max(w.settle_s for w in lagging) > max(w.settle_s for w in profiles)
    dev = SimulatedJetson("orin-agx", seed=3, settle_s=2.5)
    for w in _windows(dev, quick_reference, 300):  # measured after settling: near the truth
        assert abs(w.power_w / dev.true_power_w(w.mode, "mobilenetv3", "train", BATCH) - 1) < 0.03
    # a rule that never holds: every window waits exactly settle_s
    bounded = _windows(SimulatedJetson("orin-agx", seed=3, settle_s=2.5), quick_reference, 300, settle_s=1.0,
                       settle_tolerance=0.0, settle_tolerance_w=0.0)
    bounded = [w for w in bounded if w.purpose == "profile"]
    assert len(bounded) >= 4 and all(1.0 - 1e-6 <= w.settle_s <= 1.0 + 1.5 * w.time_ms / 1000 for w in bounded)


def test_a_verification_waits_for_the_tail_of_the_expected_step_in_power(quick_reference) -> None:
    tuner = OnlineTuner(SimulatedJetson("orin-agx"), "mobilenetv3", power_budget_w=20.0, reference=quick_reference)
    assert tuner._verify_wait_s() == 5.0  # nothing measured yet: the bound, 2 x settle_s
    from edgetune.online import _Request

    tuner.windows.append(Window(0, "profile", PowerMode(4, 1344.0, 318.75, 665.6), BATCH, 0, 5, 5.0, 0.1, 13.7,
                                0.2, 14.0, 26, 0.5))
    tuner._request, tuner._slot = _Request([PowerMode(4, 2201.6, 522.75, 3199.0)], BATCH, "verify", [20.0]), 0
    assert tuner._verify_wait_s() == pytest.approx(2.5 / 4 * np.log(6.3 / 0.02))  # 3.6 s for a 6.3 W step
    tuner._request.expected_w = [13.71]
    assert tuner._verify_wait_s() == 0.0  # no step to wait for


class _Samples:
    """A sampler over a recorded power trace: ``poll`` gives the samples up to the device's clock."""

    def __init__(self, clock, samples: list) -> None:
        self.clock, self.samples, self.given = clock, samples, 0

    def poll(self) -> list:
        new = [x for x in self.samples[self.given:] if x.t_s <= self.clock.now_s()]
        self.given += len(new)
        return new


def _verifying(quick_reference, last_w: float, expected_w: float, true_w: float, tau_s: float = 0.625):
    """A tuner verifying a choice predicted at ``expected_w`` that settles at ``true_w`` (time constant ``tau_s``;
    the tuner's ``settle_s`` 2.5 says 0.625 s) from the last window's ``last_w``, 50 Hz samples with 0.3 W of
    noise; budget 20 W."""
    from edgetune.devices.sampling import PowerSample
    from edgetune.online import _Request

    dev = SimulatedJetson("orin-agx")
    tuner = OnlineTuner(dev, "mobilenetv3", power_budget_w=20.0, reference=quick_reference)
    mode = PowerMode(4, 2201.6, 522.75, 3199.0)
    tuner.windows.append(Window(0, "profile", mode, BATCH, 0, 5, 3.0, 0.1, last_w, 0.2, last_w, 26, 0.5))
    tuner._request, tuner._slot = _Request([mode], BATCH, "verify", [expected_w]), 0
    t0 = dev.clock.now_s()
    noise = np.random.default_rng(0).normal(0.0, 0.3, 500)
    trace = [PowerSample(t0 + k / 50, true_w + (last_w - true_w) * np.exp(-k / 50 / tau_s) + noise[k]) for k in range(500)]
    tuner._switch_t, tuner._sampler = t0, _Samples(dev.clock, trace)
    tuner._power_t0 = t0 + tuner._verify_wait_s()
    return tuner, dev.clock


def _first_decision(tuner, clock, until_s: float = 5.0) -> float | None:
    """The level a verification reports when its samples first decide (None: the full window decides)."""
    while clock.now_s() - tuner._switch_t < until_s:
        clock.advance(0.05)
        if tuner._decided_early():
            return tuner._early_level_w
    return None


def test_a_verification_ends_once_its_samples_decide_against_the_budget(quick_reference) -> None:
    # 0.6 W under the budget: decided once 1.25 s (the slow time constant) has passed in the later half
    tuner, clock = _verifying(quick_reference, last_w=18.0, expected_w=19.4, true_w=19.4)
    clock.advance(2.4)
    assert not tuner._decided_early()  # too soon to trust the settling model
    clock.advance(0.2)
    assert tuner._decided_early() and abs(tuner._early_level_w - 19.4) < 0.2  # the level, not the tail's mean
    assert tuner._power_t0 == pytest.approx(tuner._switch_t + 1.3)  # over the later half
    # 0.05 W under: only the full window decides
    tuner, clock = _verifying(quick_reference, last_w=18.0, expected_w=19.95, true_w=19.95)
    assert _first_decision(tuner, clock) is None
    # predicted 0.5 W over the last window but drawing 5.3 W more, over the budget, on a board settling 1.6x
    # slower than settle_s says: never accepted (the samples' own step sets the tail, reckoned for a slow board)
    for tau_s in (0.625, 1.0):
        tuner, clock = _verifying(quick_reference, last_w=15.0, expected_w=15.5, true_w=20.3, tau_s=tau_s)
        level = _first_decision(tuner, clock)
        assert level is None or level > 20.0, tau_s


def test_settle_arguments_are_refused(quick_reference) -> None:
    dev = SimulatedJetson("orin-agx")
    for kw, field in (({"settle_window_s": 0.0}, "settle_window_s"), ({"settle_tolerance": -0.1}, "settle_tolerance"),
                      ({"sample_rate_hz": 0.0}, "sample_rate_hz")):
        with pytest.raises(InvalidArgument) as exc:
            OnlineTuner(dev, "mobilenetv3", power_budget_w=20.0, reference=quick_reference, **kw)
        assert exc.value.field == field
