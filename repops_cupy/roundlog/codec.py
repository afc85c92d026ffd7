"""Byte encoding of one step's rounding log.

A step's rounded values form one canonical stream: every rounding site in program
order, each laid out over the whole batch (see :mod:`.engine`), so positions are
plain integers below the stream length, whatever micro-batching produced them.

Layout (all integers unsigned LEB128 varints unless noted)::

    magic b"GRL1" | step | stream_length
    bit entries:   count | [method byte | positions payload | direction bits]
    value entries: count | [method byte | positions payload | float32 LE values]

Positions are sorted and stored by one of three methods, whichever is smallest:
0 = varint gaps, 1 = Rice-coded gaps (parameter k in one byte), 2 = bitmap over the
stream. Direction bits are packed eight per byte (numpy bit order "little").
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np

MAGIC = b"GRL1"
METHOD_VARINT, METHOD_RICE, METHOD_BITMAP = 0, 1, 2


class LogFormatError(ValueError):
    """A rounding log that cannot be decoded or does not fit the run replaying it."""


# ---------------------------------------------------------------- varints

def encode_varints(values: np.ndarray) -> bytes:
    """Unsigned LEB128 of each value, vectorised."""
    v = np.asarray(values, dtype=np.uint64)
    if v.size == 0:
        return b""
    nbytes = np.ones(v.shape, dtype=np.int64)
    t = v >> np.uint64(7)
    while t.any():
        nbytes += t > 0
        t >>= np.uint64(7)
    total = int(nbytes.sum())
    out = np.zeros(total, dtype=np.uint8)
    starts = np.concatenate(([0], np.cumsum(nbytes)[:-1]))  # exact: integer offsets
    rem = v.copy()
    for j in range(int(nbytes.max())):
        live = nbytes > j
        byte = (rem[live] & np.uint64(0x7F)).astype(np.uint8)
        more = (nbytes[live] > j + 1).astype(np.uint8) << 7
        out[starts[live] + j] = byte | more
        rem[live] >>= np.uint64(7)
    return out.tobytes()


def decode_varints(buf: memoryview | bytes, offset: int, count: int) -> tuple[np.ndarray, int]:
    """``count`` varints from ``buf[offset:]``; returns them and the offset after."""
    if count == 0:
        return np.zeros(0, dtype=np.uint64), offset
    raw = np.frombuffer(buf, dtype=np.uint8, offset=offset)
    ends = np.flatnonzero(raw < 0x80)
    if ends.size < count:
        raise LogFormatError("truncated varint sequence")
    ends = ends[:count]
    length = int(ends[-1]) + 1
    raw = raw[:length].astype(np.uint64)
    starts = np.concatenate(([0], ends[:-1] + 1))
    nbytes = ends - starts + 1
    if nbytes.max() > 10:
        raise LogFormatError("varint too long")
    vals = np.zeros(count, dtype=np.uint64)
    for j in range(int(nbytes.max())):
        live = nbytes > j
        vals[live] |= (raw[starts[live] + j] & np.uint64(0x7F)) << np.uint64(7 * j)
    return vals, offset + length


def _write_varint(out: io.BytesIO, n: int) -> None:
    """One varint, as :func:`encode_varints` writes it (without NumPy: a header field)."""
    if not 0 <= n < 1 << 64:
        raise ValueError(f"varint out of range: {n}")
    while n >= 0x80:
        out.write(bytes(((n & 0x7F) | 0x80,)))
        n >>= 7
    out.write(bytes((n,)))


def _read_varint(buf: bytes, offset: int) -> tuple[int, int]:
    """One varint, as :func:`decode_varints` reads it (without scanning the rest of the buffer)."""
    n = shift = 0
    for length in range(10):
        if offset + length >= len(buf):
            raise LogFormatError("truncated varint sequence")
        byte = buf[offset + length]
        n |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return n & 0xFFFFFFFFFFFFFFFF, offset + length + 1
    raise LogFormatError("varint too long")


# ---------------------------------------------------------------- Rice coding

def _gaps(pos: np.ndarray) -> np.ndarray:
    """First position, then distance-minus-one to the previous (sorted, distinct)."""
    gaps = np.empty_like(pos)
    if pos.size:
        gaps[0] = pos[0]
        gaps[1:] = pos[1:] - pos[:-1] - np.uint64(1)
    return gaps


def _ungap(gaps: np.ndarray) -> np.ndarray:
    return np.cumsum(gaps + np.uint64(1), dtype=np.uint64) - np.uint64(1)  # exact: uint64 positions


def rice_bits(gaps: np.ndarray, k: int) -> int:
    return int((gaps >> np.uint64(k)).sum()) + gaps.size * (k + 1)


def best_rice_k(gaps: np.ndarray) -> int:
    """The first k in [0, 40) with the fewest Rice bits. rice_bits is convex in k (its step from k
    to k + 1 is gaps.size - sum(ceil((g >> k) / 2)), which grows with k), so the first k whose
    successor is no better is that minimum."""
    bits = rice_bits(gaps, 0)
    for k in range(39):
        following = rice_bits(gaps, k + 1)
        if following >= bits:
            return k
        bits = following
    return 39


def encode_rice(gaps: np.ndarray, k: int) -> bytes:
    """Each gap as (gap >> k) one-bits, a zero bit, then the low k bits, MSB first."""
    q = (gaps >> np.uint64(k)).astype(np.int64)
    lengths = q + 1 + k
    total = int(lengths.sum())
    bits = np.zeros(total, dtype=np.uint8)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))  # exact: integer offsets
    if q.sum():
        owner = np.repeat(np.arange(q.size), q)
        within = np.arange(owner.size) - np.repeat(np.concatenate(([0], np.cumsum(q)[:-1])), q)  # exact: integers
        bits[starts[owner] + within] = 1
    if k:
        shifts = np.arange(k - 1, -1, -1, dtype=np.uint64)
        low = ((gaps[:, None] >> shifts[None, :]) & np.uint64(1)).astype(np.uint8)
        cols = (starts + q + 1)[:, None] + np.arange(k)[None, :]
        bits[cols.reshape(-1)] = low.reshape(-1)
    return np.packbits(bits).tobytes()


def decode_rice(payload: bytes, count: int, k: int) -> np.ndarray:
    bits = np.unpackbits(np.frombuffer(payload, dtype=np.uint8))
    zeros = np.flatnonzero(bits == 0)
    out = np.zeros(count, dtype=np.uint64)
    cur = 0
    zi = 0
    for i in range(count):
        # the next zero bit at or after cur ends the unary part
        zi = int(np.searchsorted(zeros, cur, side="left"))
        if zi >= zeros.size:
            raise LogFormatError("truncated Rice code")
        z = int(zeros[zi])
        q = z - cur
        end = z + 1 + k
        if end > bits.size:
            raise LogFormatError("truncated Rice code")
        low = 0
        for b in bits[z + 1 : end]:
            low = (low << 1) | int(b)
        out[i] = (q << k) | low
        cur = end
    return out


# ---------------------------------------------------------------- positions

def encode_positions(pos: np.ndarray, stream_length: int) -> bytes:
    """Smallest of the three methods; returns method byte + payload."""
    pos = np.asarray(pos, dtype=np.uint64)
    gaps = _gaps(pos)
    candidates = [bytes([METHOD_VARINT]) + encode_varints(gaps)]
    k = best_rice_k(gaps)
    rice_len = (rice_bits(gaps, k) + 7) // 8 + 2
    if rice_len < len(candidates[0]):
        candidates.append(bytes([METHOD_RICE, k]) + _rice_payload_header(gaps, k) + encode_rice(gaps, k))
    if (stream_length + 7) // 8 + 1 < min(len(c) for c in candidates):
        bitmap = np.zeros(stream_length, dtype=np.uint8)
        bitmap[pos.astype(np.int64)] = 1
        candidates.append(bytes([METHOD_BITMAP]) + np.packbits(bitmap, bitorder="little").tobytes())
    return min(candidates, key=len)


def _rice_payload_header(gaps: np.ndarray, k: int) -> bytes:
    return encode_varints(np.array([(rice_bits(gaps, k) + 7) // 8], dtype=np.uint64))


def decode_positions(buf: bytes, offset: int, count: int, stream_length: int) -> tuple[np.ndarray, int]:
    method = buf[offset]
    offset += 1
    if method == METHOD_VARINT:
        gaps, offset = decode_varints(buf, offset, count)
        pos = _ungap(gaps)
    elif method == METHOD_RICE:
        k = buf[offset]
        nbytes, offset = _read_varint(buf, offset + 1)
        gaps = decode_rice(buf[offset : offset + nbytes], count, k)
        offset += nbytes
        pos = _ungap(gaps)
    elif method == METHOD_BITMAP:
        nbytes = (stream_length + 7) // 8
        bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8, count=nbytes, offset=offset), bitorder="little")
        pos = np.flatnonzero(bits[:stream_length]).astype(np.uint64)
        offset += nbytes
        if pos.size != count:
            raise LogFormatError("bitmap holds a different number of positions than its count")
    else:
        raise LogFormatError(f"unknown position method {method}")
    if pos.size and (int(pos[-1]) >= stream_length):
        raise LogFormatError("position beyond the stream")
    return pos, offset


# ---------------------------------------------------------------- step log

@dataclass
class StepLog:
    """One step's entries, positions in the canonical stream (sorted, distinct)."""

    step: int
    stream_length: int
    bit_pos: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    bit_up: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    value_pos: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    value: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))

    @property
    def entries(self) -> int:
        return int(self.bit_pos.size + self.value_pos.size)

    def encode(self) -> bytes:
        out = io.BytesIO()
        out.write(MAGIC)
        _write_varint(out, self.step)
        _write_varint(out, self.stream_length)
        _write_varint(out, self.bit_pos.size)
        if self.bit_pos.size:
            out.write(encode_positions(self.bit_pos, self.stream_length))
            out.write(np.packbits(self.bit_up.astype(np.uint8), bitorder="little").tobytes())
        _write_varint(out, self.value_pos.size)
        if self.value_pos.size:
            out.write(encode_positions(self.value_pos, self.stream_length))
            out.write(self.value.astype("<f4").tobytes())
        return out.getvalue()

    @classmethod
    def decode(cls, buf: bytes) -> "StepLog":
        if bytes(buf[:4]) != MAGIC:
            raise LogFormatError("not a rounding log (bad magic)")
        off = 4
        step, off = _read_varint(buf, off)
        length, off = _read_varint(buf, off)
        nbit, off = _read_varint(buf, off)
        log = cls(step=step, stream_length=length)
        if nbit:
            log.bit_pos, off = decode_positions(buf, off, nbit, length)
            nb = (nbit + 7) // 8
            if off + nb > len(buf):
                raise LogFormatError("truncated direction bits")
            log.bit_up = np.unpackbits(np.frombuffer(buf, dtype=np.uint8, count=nb, offset=off), bitorder="little")[:nbit].astype(bool)
            off += nb
        nval, off = _read_varint(buf, off)
        if nval:
            log.value_pos, off = decode_positions(buf, off, nval, length)
            if off + 4 * nval > len(buf):
                raise LogFormatError("truncated values")
            log.value = np.frombuffer(buf, dtype="<f4", count=nval, offset=off).astype(np.float32)
            off += 4 * nval
        if off != len(buf):
            raise LogFormatError("trailing bytes after the log")
        return log
