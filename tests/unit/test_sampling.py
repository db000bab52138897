"""ThreadedSampler (real clock, daemon thread) and VirtualSampler (virtual clock)."""

from __future__ import annotations

import threading
import time

import pytest

from edgetune.base.clocks import RealClock, VirtualClock
from edgetune.devices.sampling import PowerSensor, ThreadedSampler, VirtualSampler
from edgetune.errors import FailedPrecondition, InvalidArgument


class CountingSensor(PowerSensor):
    def __init__(self, delay_s: float = 0.0, fail_every: int = 0) -> None:
        self.reads = 0
        self.delay_s = delay_s
        self.fail_every = fail_every

    def read_w(self) -> float:
        self.reads += 1
        if self.fail_every and self.reads % self.fail_every == 0:
            raise OSError("i2c busy")
        if self.delay_s:
            time.sleep(self.delay_s)
        return 10.0 + self.reads

    def rails_w(self) -> dict[str, float]:
        return {"VDD_GPU_SOC": 4.0, "VDD_CPU_CV": 2.0}


def test_first_sample_is_taken_at_start():
    clock = RealClock()
    sampler = ThreadedSampler(CountingSensor(), clock, rate_hz=1.0)
    before = clock.now_s()
    sampler.start()
    after = clock.now_s()
    samples = sampler.stop()  # a 1 Hz sampler stopped at once has exactly the start sample
    assert len(samples) == 1
    assert before <= samples[0].t_s <= after
    assert samples[0].power_w == 11.0 and samples[0].rails_w == {"VDD_GPU_SOC": 4.0, "VDD_CPU_CV": 2.0}


def test_rate_and_drift_free_schedule():
    # Each read takes 20 ms of a 40 ms period: "previous + period" scheduling would give one
    # sample per 60 ms (~7 in 0.4 s); deadlines at t0 + k/rate give one per 40 ms (~11).
    clock = RealClock()
    sampler = ThreadedSampler(CountingSensor(delay_s=0.02), clock, rate_hz=25.0, with_rails=False)
    sampler.start()
    time.sleep(0.41)
    samples = sampler.stop()
    assert 8 <= len(samples) <= 12
    t0 = samples[0].t_s
    offsets = [(s.t_s - t0) * 25.0 for s in samples]
    # Sample k sits at (or just after) the k-th deadline, never a full period late.
    assert all(-0.05 <= off - round(off) < 0.5 for off in offsets)
    assert samples[0].rails_w is None


def test_stop_joins_the_thread_and_returns_samples():
    sampler = ThreadedSampler(CountingSensor(), RealClock(), rate_hz=100.0)
    sampler.start()
    thread = sampler._thread
    assert thread is not None and thread.daemon and thread.is_alive()
    time.sleep(0.05)
    samples = sampler.stop()
    assert not thread.is_alive()
    assert len(samples) >= 2
    assert all(b.t_s > a.t_s for a, b in zip(samples, samples[1:], strict=False))
    n = len(samples)
    time.sleep(0.03)
    assert len(sampler._samples) == n, "no sample after stop"


def test_stop_is_prompt_even_at_a_slow_rate():
    sampler = ThreadedSampler(CountingSensor(), RealClock(), rate_hz=0.1)
    sampler.start()
    t = time.monotonic()
    sampler.stop()
    assert time.monotonic() - t < 0.5


def test_failed_reads_are_skipped_and_counted():
    sampler = ThreadedSampler(CountingSensor(fail_every=2), RealClock(), rate_hz=200.0, with_rails=False)
    sampler.start()
    time.sleep(0.05)
    samples = sampler.stop()
    assert samples and sampler.errors >= 1 and isinstance(sampler.last_error, OSError)


def test_misuse_is_refused():
    with pytest.raises(InvalidArgument):
        ThreadedSampler(CountingSensor(), RealClock(), rate_hz=0)
    sampler = ThreadedSampler(CountingSensor(), RealClock(), rate_hz=10.0)
    with pytest.raises(FailedPrecondition):
        sampler.stop()
    sampler.start()
    with pytest.raises(FailedPrecondition):
        sampler.start()
    sampler.stop()


def test_sampler_threads_do_not_leak():
    before = threading.active_count()
    for _ in range(5):
        s = ThreadedSampler(CountingSensor(), RealClock(), rate_hz=50.0)
        s.start()
        s.stop()
    assert threading.active_count() == before


def test_virtual_sampler_samples_the_virtual_instants():
    clock = VirtualClock(100.0)
    sampler = VirtualSampler(lambda t: (t - 100.0, None), clock, rate_hz=2.0)
    sampler.start()
    clock.advance(1.6)
    samples = sampler.stop()
    assert [s.t_s for s in samples] == [100.0, 100.5, 101.0, 101.5]
    assert [s.power_w for s in samples] == [0.0, 0.5, 1.0, 1.5]


def test_poll_hands_out_each_sample_once_and_stop_still_returns_them_all():
    clock = VirtualClock(100.0)
    sampler = VirtualSampler(lambda t: (t - 100.0, None), clock, rate_hz=2.0)
    sampler.start()
    clock.advance(0.6)
    assert [s.t_s for s in sampler.poll()] == [100.0, 100.5]
    assert sampler.poll() == []
    clock.advance(1.0)
    assert [s.t_s for s in sampler.poll()] == [101.0, 101.5]
    assert [s.t_s for s in sampler.stop()] == [100.0, 100.5, 101.0, 101.5]


def test_threaded_poll_sees_samples_while_sampling_goes_on():
    sampler = ThreadedSampler(CountingSensor(), RealClock(), rate_hz=50.0)
    sampler.start()
    first = sampler.poll()  # the one taken in start(), and whatever the thread added since
    assert first and first[0].power_w == 11.0
    second = sampler.poll()
    everything = sampler.stop()
    assert everything[:len(first) + len(second)] == first + second  # in order, none twice
