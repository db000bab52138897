"""The pre-trained checkpoint's disk cache (``$EDGETUNE_CHECKPOINT_DIR``): the processes of one run train
each checkpoint once; one found on disk is loaded instead of trained, with the same weights."""

from __future__ import annotations

import os

import pytest
import torch

from edgetune.estimation import proxy


@pytest.fixture
def fresh_cache():
    proxy._pretrained_state.cache_clear()  # this process's copies: the test is about the disk's
    yield
    proxy._pretrained_state.cache_clear()


def test_a_checkpoint_is_trained_once_then_loaded_from_the_directory(tmp_path, monkeypatch, fresh_cache):
    assert os.environ.get(proxy.CHECKPOINT_DIR_ENV)  # set for the run by tests/conftest.py (the name spelled out)
    monkeypatch.setenv(proxy.CHECKPOINT_DIR_ENV, str(tmp_path / "ckpt"))
    trained = proxy.pretrained_state("resnet-slim", epochs=1, seed=3)
    (saved,) = (tmp_path / "ckpt").glob("*.pt")
    assert len(saved.name) < 64  # named by a digest of the arguments

    proxy._pretrained_state.cache_clear()
    monkeypatch.setattr(proxy, "_pretrain", lambda *a: pytest.fail(f"trained again: {a}"))
    loaded = proxy.pretrained_state("resnet-slim", epochs=1, seed=3)
    assert loaded.keys() == trained.keys() and all(torch.equal(loaded[k], trained[k]) for k in trained)


def test_without_the_directory_nothing_is_written(tmp_path, monkeypatch, fresh_cache):
    monkeypatch.delenv(proxy.CHECKPOINT_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    first = proxy.pretrained_state("resnet-slim", epochs=1, seed=4)
    assert list(tmp_path.iterdir()) == []
    assert proxy.pretrained_state("resnet-slim", epochs=1, seed=4) is first  # cached in the process


def test_a_long_or_odd_workload_name_gives_a_short_file_name(tmp_path, monkeypatch, fresh_cache):
    """The estimator passes a caller's workload name through: it must not become a path (the fuzz test's
    4 kB name once made an OSError, an UNKNOWN status, out of a refusal)."""
    monkeypatch.setenv(proxy.CHECKPOINT_DIR_ENV, str(tmp_path / "ckpt"))
    monkeypatch.setattr(proxy, "_pretrain", lambda *a: {"w": torch.zeros(1)})
    assert torch.equal(proxy.pretrained_state("x" * 4000 + "/../y")["w"], torch.zeros(1))
    (saved,) = (tmp_path / "ckpt").glob("*.pt")
    assert len(saved.name) < 64
