"""Ids as fingerprints, as the service computes them (docs/DESIGN-NOTES.md "Sparse models"):
every categorical id, a string or an integer, becomes a 48-bit fingerprint, and hashing into
bins, vocabulary lookups and crosses work on fingerprints. An exported ONNX model takes a hashed
column (`"encode": "hash"`) and a cross (`"crosses"`) as int64 fingerprints: compute them here
(a missing value is fingerprint(""); a number column's id is the integer at or below it).

    pstrain.ids.fingerprint("user-42")      # a string id (its UTF-8 bytes as given)
    pstrain.ids.fingerprint(42)             # an integer id (another fingerprint than "42")
    pstrain.ids.cross(fa, fb)               # the pair, in order; more columns fold left
    pstrain.ids.bin(f, 1000)                # its bin among 1,000
"""

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment (2^64 / the golden ratio)
FINGERPRINT_BITS = 48


def _finalize(z):
    """SplitMix64's output function (a bijection of 64-bit words)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def fingerprint(value):
    """The 48-bit fingerprint of a string (FNV-1a 64 over its UTF-8 bytes) or an integer (its
    64-bit two's complement plus SplitMix64's increment, as SplitMix64 seeded with it), each
    through SplitMix64's finaliser, top 48 bits."""
    if isinstance(value, bool):
        raise TypeError("a boolean is not an id")
    if isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            raise ValueError("an integer id must fit in 64 bits")
        return _finalize(((value & _MASK64) + _GAMMA) & _MASK64) >> (64 - FINGERPRINT_BITS)
    if isinstance(value, str):
        value = value.encode("utf-8")
    if not isinstance(value, (bytes, bytearray)):
        raise TypeError("an id is a string, bytes or an integer")
    h = 0xCBF29CE484222325
    for byte in value:
        h = ((h ^ byte) * 0x100000001B3) & _MASK64
    return _finalize(h) >> (64 - FINGERPRINT_BITS)


def cross(*fingerprints):
    """The fingerprint of a cross of columns' fingerprints, in order (folded left)."""
    if len(fingerprints) < 2:
        raise ValueError("a cross takes two fingerprints or more")
    acc = fingerprints[0]
    for f in fingerprints[1:]:
        acc = _finalize(((acc * _GAMMA) & _MASK64) ^ f) >> (64 - FINGERPRINT_BITS)
    return acc


def bin(fingerprint_value, bins):  # noqa: A001 (the service's word for it)
    """The bin of a fingerprint among `bins`: fingerprint mod bins."""
    if bins <= 0:
        raise ValueError("bins must be positive")
    return fingerprint_value % bins
