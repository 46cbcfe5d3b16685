"""The scheduler's allocator settings (rtax.service.memory): real calls into this process."""

from __future__ import annotations

import pyarrow

from rtax.service import memory


def test_settle_switches_arrow_to_the_system_pool_and_says_so() -> None:
    before = pyarrow.default_memory_pool()
    try:
        done = memory.settle()
        assert pyarrow.default_memory_pool().backend_name == "system"
        assert "Arrow's system memory pool" in done
        assert f"{memory.ARENAS} malloc arenas" in done  # glibc here (Debian)
        # Arrow arrays still work on the pool they now use
        assert pyarrow.array(["a", "bb"]).to_pylist() == ["a", "bb"]
    finally:
        pyarrow.set_memory_pool(before)


def test_trim_returns_a_freed_heap_to_the_kernel() -> None:
    blocks = [bytearray(64 * 1024) for _ in range(2000)]  # ~128 MB below mmap's threshold
    del blocks
    assert memory.trim() is True
