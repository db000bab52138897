"""ThreadedSampler (real clock, daemon thread) and VirtualSampler (virtual clock)."""

from __future__ import annotations

import threading
import time

import pytest

from edgetune.base.clocks import RealClock, VirtualClock
from edgetune.devices.sampling import PowerSensor, ThreadedSampler, VirtualSampler, next_deadline
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


@pytest.mark.parametrize("read_s, expected", [(0.02, 11), (0.05, 6)])
def test_the_schedule_keeps_its_deadlines_whatever_a_read_takes(read_s, expected):
    # The sampler's schedule on a virtual timeline (a real thread's timing depends on the machine's load):
    # each read takes read_s of a 40 ms period. "previous + period" would give one sample per
    # 40 ms + read_s; deadlines at t0 + k/rate give one per 40 ms, and a read longer than the period
    # skips deadlines, never shifts them.
    period_s, t0 = 0.04, 100.0
    now, k, taken = t0, 1, [t0]
    now += read_s  # the first sample, at the start instant
    while True:
        k, due = next_deadline(t0, period_s, k, now)
        if due > t0 + 0.41:
            break
        now = due
        taken.append(now)
        now += read_s
        k += 1
    assert len(taken) == expected
    assert all(abs((t - t0) / period_s - round((t - t0) / period_s)) < 1e-9 for t in taken)  # on a deadline


def test_the_threaded_sampler_samples_on_its_schedule():
    sampler = ThreadedSampler(CountingSensor(delay_s=0.002), RealClock(), rate_hz=25.0, with_rails=False)
    sampler.start()
    deadline = time.monotonic() + 30  # a busy machine may delay the thread: wait for samples, not a fixed time
    while len(sampler._samples) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    samples = sampler.stop()
    assert len(samples) >= 4 and samples[0].rails_w is None
    t0 = samples[0].t_s
    assert all(b.t_s > a.t_s for a, b in zip(samples, samples[1:], strict=False))
    # at most one sample per deadline (a late wake-up skips deadlines, test above): never faster than the rate
    assert len(samples) <= (samples[-1].t_s - t0) * 25.0 + 1 + 1e-6


def test_stop_joins_the_thread_and_returns_samples():
    sampler = ThreadedSampler(CountingSensor(), RealClock(), rate_hz=100.0)
    sampler.start()
    thread = sampler._thread
    assert thread is not None and thread.daemon and thread.is_alive()
    deadline = time.monotonic() + 30  # wait for the thread's samples, not a fixed time (load-proof)
    while len(sampler._samples) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
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
