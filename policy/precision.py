"""Which number format a device computes in natively: bf16 only where the hardware has it.

Consumes a configured setting ('auto', or an explicit format) and a device; produces the
format the generator's weights or the learner's DeepSpeed engine use. On a CPU, 'auto' picks
bfloat16 only when /proc/cpuinfo lists bf16 instructions (AVX512-BF16 or AMX-BF16): without
them torch emulates bf16, about twice as slow as float32 (FACTS: 46 against 105 tokens/s on
an AVX2 EPYC). On CUDA 'auto' is bfloat16. It imports no torch and changes nothing.
"""

from __future__ import annotations

from pathlib import Path

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
"CPU flags that mean bf16 matrix arithmetic runs in hardware."


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo cannot be read)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags") and ":" in line:
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def native_bf16(device: str, flags: frozenset[str] | None = None) -> bool:
    """True where bf16 is computed natively on `device` ('cpu' or 'cuda')."""
    if device == "cuda":
        return True
    return bool((cpu_flags() if flags is None else flags) & BF16_FLAGS)


def weights_dtype(setting: str, device: str, flags: frozenset[str] | None = None) -> str:
    """'bfloat16' or 'float32' for a generator's `dtype` setting."""
    if setting != "auto":
        return setting
    return "bfloat16" if native_bf16(device, flags) else "float32"


def training_precision(setting: str, device: str, flags: frozenset[str] | None = None) -> str:
    """'bf16' or 'fp32' for a learner's `precision` setting."""
    if setting != "auto":
        return setting
    return "bf16" if native_bf16(device, flags) else "fp32"
