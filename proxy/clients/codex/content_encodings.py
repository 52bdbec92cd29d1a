"""Which content codings the upstream session can decode (``Accept-Encoding``).

aiohttp decodes gzip and deflate itself, Brotli when the ``Brotli`` package is installed and
zstd when ``backports.zstd`` (or Python 3.14's ``compression.zstd``) is. The fingerprint names
what the real client accepts; advertising a coding we cannot decode would make the upstream
send bytes the SSE scanner cannot read.
"""

from __future__ import annotations

import functools

from aiohttp import compression_utils


@functools.cache
def decodable_encodings() -> frozenset[str]:
    encodings = {"gzip", "deflate", "identity"}
    if compression_utils.HAS_BROTLI:
        encodings.add("br")
    if compression_utils.HAS_ZSTD:
        encodings.add("zstd")
    return frozenset(encodings)


def decodable_accept_encoding(value: str) -> str:
    """``value`` (an ``Accept-Encoding`` list) without the codings this process cannot decode;
    order and q-values of the rest are kept."""
    kept = [
        item.strip()
        for item in value.split(",")
        if item.strip() and item.split(";")[0].strip().lower() in decodable_encodings()
    ]
    return ", ".join(kept)
