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

#: The name written next to each checksum, so that a later change of algorithm reads as a mismatch.
CHECKSUM_ALGORITHM = "xxh3_128"


def checksum(*parts: np.ndarray | bytes | str) -> str:
    """Hex checksum of ``parts`` in order: arrays by their C-order bytes (no copy when contiguous),
    bytes as they are, strings as UTF-8; each part's length is hashed too, so parts cannot shift."""
    digest = xxhash.xxh3_128()
    for part in parts:
        if isinstance(part, str):
            data: memoryview | bytes = part.encode()
        elif isinstance(part, np.ndarray):
            data = memoryview(np.ascontiguousarray(part).reshape(-1).view(np.uint8))
        else:
            data = part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()
