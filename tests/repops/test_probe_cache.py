"""The int8 engine's saturation probe runs once per machine: its answer is kept on disk under a
key of the CPU, the torch build and the probe itself (repops_cupy/probe_cache.py)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from repops_cupy import _matmul_engines as engines
from repops_cupy import probe_cache
from repops_cupy.probe_cache import remembered


class Probe:
    def __init__(self, answer: bool) -> None:
        self.answer, self.calls = answer, 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.answer


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(probe_cache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("answer", [True, False])
def test_an_answer_is_probed_once_per_key_and_then_read(cache, answer):
    probe = Probe(answer)
    assert remembered("p", "machine A", probe) is answer
    assert remembered("p", "machine A", probe) is answer
    assert probe.calls == 1
    assert remembered("p", "machine B", probe) is answer  # another key: another machine, probed
    assert probe.calls == 2
    assert len(list(cache.iterdir())) == 2


def test_a_damaged_entry_is_probed_again_and_replaced(cache):
    probe = Probe(True)
    remembered("p", "k", probe)
    (entry,) = cache.iterdir()
    for damage in (b"", b"ye", b"\xff\xfe"):
        entry.write_bytes(damage)
        assert remembered("p", "k", probe) is True
    assert probe.calls == 4
    assert entry.read_text() == "yes"


def test_without_a_writable_cache_every_call_probes(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(probe_cache.CACHE_ENV, str(blocker / "cache"))  # under a file: mkdir fails
    probe = Probe(False)
    assert remembered("p", "k", probe) is False
    assert remembered("p", "k", probe) is False
    assert probe.calls == 2


def test_the_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(probe_cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert probe_cache.cache_dir() == tmp_path / "gavel"
    monkeypatch.setenv(probe_cache.CACHE_ENV, str(tmp_path / "own"))
    assert probe_cache.cache_dir() == tmp_path / "own"


def test_the_cpu_identity_names_the_cpu_features():
    identity = probe_cache.cpu_identity()
    if os.path.exists("/proc/cpuinfo"):
        assert "flags" in identity or "Features" in identity
    assert identity


ANSWERS = (engines.int8_available, engines.int8_pays_on_cpu)


@pytest.fixture
def fresh_answers():
    """int8_available and int8_pays_on_cpu asked anew (their in-process caches cleared) before and after."""
    for answer in ANSWERS:
        answer.cache_clear()
    yield
    for answer in ANSWERS:  # the next caller reads (or probes) the real machine's answers
        answer.cache_clear()


@pytest.mark.skipif(not engines.torch_available(), reason="torch is not installed")
def test_int8_available_probes_once_per_cpu_and_isa_limit(cache, monkeypatch, fresh_answers):
    probe = Probe(True)
    monkeypatch.setattr(engines, "probe_int8", lambda calls: probe())
    for cpu, isa, probes in (("cpu one", "", 1), ("cpu one", "", 1), ("cpu two", "", 2), ("cpu one", "AVX2", 3)):
        monkeypatch.setattr(engines, "cpu_identity", lambda: cpu)
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", isa)
        engines.int8_available.cache_clear()
        assert engines.int8_available() is True
        assert probe.calls == probes, (cpu, isa)


@pytest.mark.parametrize("exact, faster, chosen", [(True, True, "int8"), (True, False, "float64"),
                                                   (False, True, "float64")])
def test_auto_takes_int8_only_where_it_is_exact_and_faster_and_remembers_the_timing(
        cache, monkeypatch, fresh_answers, exact, faster, chosen):
    from repops_cupy import matmul as mm

    timing = Probe(faster)
    monkeypatch.setattr(engines, "int8_available", lambda: exact)
    monkeypatch.setattr(engines, "int8_beats_float64", lambda rounds=3: timing())
    monkeypatch.delenv(mm.ENGINE_ENV, raising=False)
    assert mm._select_engine("auto", np) == chosen
    engines.int8_pays_on_cpu.cache_clear()  # another process: reads the answer
    assert mm._select_engine("auto", np) == chosen
    assert timing.calls == (1 if exact else 0)


def test_the_timing_compares_the_two_engines_on_the_same_digits():
    """What it times are the engines' own plane functions, each as often."""
    calls = []
    real_int8, real_f64 = engines.int8_planes, engines.float64_planes

    def int8(*args):
        calls.append("int8")
        return real_int8(*args)

    def f64(*args):
        calls.append("float64")
        return real_f64(*args)

    import unittest.mock as mock

    with mock.patch.object(engines, "int8_planes", int8), mock.patch.object(engines, "float64_planes", f64):
        if not engines.int8_available():
            pytest.skip("torch._int_mm is not exact here")
        engines.int8_beats_float64(rounds=2)
    assert calls == ["int8", "int8", "float64", "float64"]
