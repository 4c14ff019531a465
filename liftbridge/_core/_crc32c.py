"""CRC-32C (Castagnoli), the checksum of the Liftbridge envelope protocol.

:func:`crc32c` uses google-crc32c's C implementation (hardware CRC
instructions where the CPU has them, about 0.3 µs per KiB) when the package
is installed, as it is with the ``nats`` extra: the NATS path is where
envelopes are built in bulk. Without it, or when only google-crc32c's own
pure-Python fallback could be imported, the small table-driven
implementation here does the work: one table lookup per byte, a few MB per
second, which is enough for the odd envelope built by hand. Both give the
same checksums; the tests check each against the standard vectors.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

# The Castagnoli polynomial 0x1EDC6F41, bit-reversed for the reflected
# (least significant bit first) form the checksum is defined in.
_POLYNOMIAL = 0x82F63B78
_MASK = 0xFFFFFFFF


def _build_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLYNOMIAL if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_TABLE = _build_table()


def pure_crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """The table-driven pure-Python CRC-32C; same contract as :func:`crc32c`."""
    table = _TABLE
    crc = value ^ _MASK
    for byte in memoryview(data).cast("B"):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ _MASK


def _load_c_extend() -> Callable[[int, bytes], int] | None:
    """google-crc32c's ``extend`` when its C extension is importable, else None."""
    try:
        with warnings.catch_warnings():
            # Without its C extension it warns and falls back to pure Python,
            # which is slower than the table here: that case is treated as absent.
            warnings.simplefilter("ignore", RuntimeWarning)
            import google_crc32c
    except ImportError:
        return None
    if google_crc32c.implementation != "c":
        return None
    extend: Callable[[int, bytes], int] = google_crc32c.extend
    return extend


_C_EXTEND = _load_c_extend()

IMPLEMENTATION = "google-crc32c" if _C_EXTEND is not None else "pure-python"
"""Which implementation :func:`crc32c` uses: ``"google-crc32c"`` or ``"pure-python"``."""


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """Computes the CRC-32C (Castagnoli) checksum of ``data``.

    Pure function; thread-safe.

    Args:
        data: the bytes to checksum.
        value: the checksum of the bytes before ``data``, to checksum a
            sequence in pieces: ``crc32c(b, crc32c(a)) == crc32c(a + b)``.

    Returns:
        The checksum as an unsigned 32-bit int, e.g. ``0xE3069283`` for
        ``b"123456789"``.
    """
    if _C_EXTEND is None:
        return pure_crc32c(data, value)
    # The C extension takes bytes only (not bytearray or memoryview).
    return _C_EXTEND(value, data if type(data) is bytes else bytes(data))
