"""Content checksums of what the caches store (feature cache entries, fold checkpoints).

xxh3-128 of raw bytes: much faster than a cryptographic hash such as blake2b, so verifying the feature
matrix on each cache hit costs little of the load (benchmarks/bench_features.py). It detects corruption (a file
truncated or overwritten, a flipped bit); it is not a defence against someone forging an entry.

>>> import numpy as np
>>> a = np.arange(4, dtype=np.float32)
>>> checksum(a, b"meta") == checksum(a.copy(), b"meta"), checksum(a, b"meta") == checksum(a[::-1].copy(), b"meta")
(True, False)
"""

from __future__ import annotations

import numpy as np
import xxhash

from backtest.memory import drop_pages, row_chunks

#: The name written next to each checksum, so that a later change of algorithm reads as a mismatch.
CHECKSUM_ALGORITHM = "xxh3_128"


def checksum(*parts: np.ndarray | bytes | str) -> str:
    """Hex checksum of ``parts`` in order: arrays by their C-order bytes (no copy when contiguous),
    bytes as they are, strings as UTF-8; each part's length is hashed too, so parts cannot shift.

    An array is read a chunk of rows at a time; the pages of a file-backed one (a cached feature matrix,
    :mod:`backtest.memory`) are dropped after each chunk, so checking it does not map the whole file in."""
    digest = xxhash.xxh3_128()
    for part in parts:
        if isinstance(part, np.ndarray):
            array = part if part.flags.c_contiguous else np.ascontiguousarray(part)  # a file's map stays one
            digest.update(array.nbytes.to_bytes(8, "little"))
            row_bytes = array.strides[0] if array.ndim > 1 else array.itemsize
            for rows in row_chunks(len(array) if array.ndim else 1, row_bytes):
                digest.update(memoryview(array.reshape(-1, *array.shape[1:])[rows].reshape(-1).view(np.uint8)))
                drop_pages(array, rows.start, rows.stop)
            continue
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()
