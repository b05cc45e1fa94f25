"""Precision by what the hardware computes natively: bf16 only with bf16 instructions."""

from __future__ import annotations

import pytest

from policy.precision import cpu_flags, training_precision, weights_dtype

pytestmark = pytest.mark.unit

EPYC_AVX2 = frozenset({"fpu", "sse2", "avx", "avx2", "fma"})
XEON_AMX = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})


def test_auto_is_float32_on_a_cpu_without_bf16_instructions():
    """An AVX2-only CPU emulates bf16, so 'auto' keeps the generator and learner in fp32."""
    assert weights_dtype("auto", "cpu", EPYC_AVX2) == "float32"
    assert training_precision("auto", "cpu", EPYC_AVX2) == "fp32"


def test_auto_is_bf16_with_avx512_bf16_or_amx_and_on_cuda():
    """AVX512-BF16 or AMX-BF16 on the CPU, or a CUDA device, make 'auto' bf16."""
    assert weights_dtype("auto", "cpu", XEON_AMX) == "bfloat16"
    assert training_precision("auto", "cpu", frozenset({"avx512_bf16"})) == "bf16"
    assert weights_dtype("auto", "cuda", EPYC_AVX2) == "bfloat16"


def test_an_explicit_setting_wins_over_the_hardware():
    """A configured format is used as given, whatever the CPU has."""
    assert weights_dtype("bfloat16", "cpu", EPYC_AVX2) == "bfloat16"
    assert training_precision("fp32", "cpu", XEON_AMX) == "fp32"


def test_cpu_flags_are_read_from_a_cpuinfo_file(tmp_path):
    """The flags line of a cpuinfo file is parsed; a missing file gives no flags."""
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16\nbugs\t: none\n")
    assert cpu_flags(info) == {"fpu", "avx2", "amx_bf16"}
    assert cpu_flags(tmp_path / "missing") == frozenset()
