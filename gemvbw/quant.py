"""Block-wise affine quantization and the packed layouts the kernels read.

For output row r and block b (``block`` consecutive elements along K; the last
block is shorter when K is not a multiple of ``block``), codes q are unsigned
integers in [0, 2**bits - 1] and ``w ~= scale[r, b] * q + offset[r, b]``.

Packed layouts, per row, block after block (every layout stores exactly
``bits`` bits per weight; only the last block may be padded, to the layout's
granule):

- w8: one byte per code.
- w4: "nibble halves": in a block of padded length Lp, byte j holds code j in
  its low nibble and code j + Lp/2 in its high nibble.
- w2: "2-bit planes": byte j holds codes j, j + Lp/4, j + 2Lp/4, j + 3Lp/4 in
  bits 0-1, 2-3, 4-5, 6-7.
- w3: a 2-bit plane of the low two bits (as w2, Lp/4 bytes) followed by a
  1-bit plane of the high bit (byte j holds bit 2 of codes j + p*Lp/8 in bit p,
  Lp/8 bytes): 3 bits per weight, no padding to 4.

The unquantized baselines, w32 (fp32) and w16 (fp16, kept as its raw uint16 bits),
are a :class:`FloatMatrix`: the weights themselves, row-major, no blocks and no
metadata, with the same interface where it applies.

Metadata (scale, offset) is float16 by default (``meta_bytes=2``), stored as its
raw uint16 bits because numba cannot load float16 arrays on the CPU; the
kernels convert it in registers, so they read exactly the bytes counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gemvbw.metrics import FLOAT_BITS

SUPPORTED_BITS = (8, 4, 3, 2)  # block-wise quantized
ALL_BITS = FLOAT_BITS + SUPPORTED_BITS  # with the unquantized baselines, fp32 and fp16
SUPPORTED_META_BYTES = (2, 4)
FP16_MAX = 65504.0
BLOCK_GRANULE = 8  # a block must be a multiple of this so every layout tiles it

# codes per layout granule: the last block is padded up to a multiple of this
_GRANULE = {8: 1, 4: 2, 2: 4, 3: 8}


def padded_len(length: int, bits: int) -> int:
    """Length of a block of ``length`` codes once padded to the layout granule."""
    g = _GRANULE[bits]
    return -(-length // g) * g


def block_nbytes(length: int, bits: int) -> int:
    """Bytes one packed block of ``length`` codes occupies."""
    return padded_len(length, bits) * bits // 8


def row_nbytes(K: int, bits: int, block: int) -> int:
    """Bytes one packed row of K codes occupies."""
    nfull, last = divmod(K, block)
    return nfull * block_nbytes(block, bits) + (block_nbytes(last, bits) if last else 0)


def num_blocks(K: int, block: int) -> int:
    return -(-K // block)


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack codes of shape (..., Lp) (Lp a multiple of the granule) into bytes (..., Lp*bits/8)."""
    codes = codes.astype(np.uint8, copy=False)
    Lp = codes.shape[-1]
    if bits == 8:
        return codes.copy()
    if bits == 4:
        h = Lp // 2
        return codes[..., :h] | (codes[..., h:] << 4)
    if bits == 2:
        return _pack_planes(codes, 2)
    if bits == 3:
        low = _pack_planes(codes & 3, 2)
        high = _pack_planes(codes >> 2, 1)
        return np.concatenate([low, high], axis=-1)
    raise ValueError(f"unsupported bits {bits}")


def unpack_codes(packed: np.ndarray, bits: int, Lp: int) -> np.ndarray:
    """Inverse of :func:`pack_codes`: bytes (..., Lp*bits/8) -> codes (..., Lp) as uint8."""
    if bits == 8:
        return packed.copy()
    if bits == 4:
        return np.concatenate([packed & 15, packed >> 4], axis=-1)
    if bits == 2:
        return _unpack_planes(packed, 2)
    if bits == 3:
        nlow = Lp // 4
        low = _unpack_planes(packed[..., :nlow], 2)
        high = _unpack_planes(packed[..., nlow:], 1)
        return low | (high << 2)
    raise ValueError(f"unsupported bits {bits}")


def _pack_planes(fields: np.ndarray, width: int) -> np.ndarray:
    per_byte = 8 // width
    n = fields.shape[-1] // per_byte
    out = np.zeros(fields.shape[:-1] + (n,), dtype=np.uint8)
    for p in range(per_byte):
        out |= fields[..., p * n:(p + 1) * n] << (width * p)
    return out


def _unpack_planes(packed: np.ndarray, width: int) -> np.ndarray:
    mask = (1 << width) - 1
    return np.concatenate(
        [(packed >> (width * p)) & mask for p in range(8 // width)], axis=-1
    )


@dataclass(frozen=True, eq=False)
class QuantizedMatrix:
    """An M x K weight matrix in packed block-wise affine form.

    ``codes`` is uint8 (M, row_nbytes); ``scale_raw``/``offset_raw`` are
    (M, nblocks), uint16 float16 bits when ``meta_bytes == 2``, float32 when 4.
    """

    M: int
    K: int
    bits: int
    block: int
    meta_bytes: int
    codes: np.ndarray
    scale_raw: np.ndarray
    offset_raw: np.ndarray

    def __post_init__(self) -> None:
        """A matrix built by hand is checked as one quantize() returns: the kernels read these arrays unchecked,
        so a short array would be read out of bounds and give garbage instead of an error."""
        check_format(self.M, self.K, self.bits, self.block, self.meta_bytes)
        meta_dtype = np.uint16 if self.meta_bytes == 2 else np.float32
        want = {"codes": ((self.M, row_nbytes(self.K, self.bits, self.block)), np.uint8),
                "scale_raw": ((self.M, self.nblocks), meta_dtype), "offset_raw": ((self.M, self.nblocks), meta_dtype)}
        for name, (shape, dtype) in want.items():
            a = getattr(self, name)
            if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != dtype or not a.flags.c_contiguous:
                got = (f"{a.dtype} {a.shape}" + ("" if a.flags.c_contiguous else ", not C-contiguous")
                       if isinstance(a, np.ndarray) else type(a).__name__)
                raise ValueError(f"QuantizedMatrix.{name} must be a C-contiguous {np.dtype(dtype)} array of shape "
                                 f"{shape} for M={self.M}, K={self.K}, bits={self.bits}, block={self.block}, "
                                 f"meta_bytes={self.meta_bytes}; got {got}")
        for name in ("scale_raw", "offset_raw"):
            values = _meta_as_float(getattr(self, name))
            if not np.all(np.isfinite(values)):
                raise ValueError(f"QuantizedMatrix.{name} holds NaN or infinity")

    @property
    def nblocks(self) -> int:
        return num_blocks(self.K, self.block)

    @property
    def scale(self) -> np.ndarray:
        """Scales as float32 (M, nblocks)."""
        return _meta_as_float(self.scale_raw)

    @property
    def offset(self) -> np.ndarray:
        """Offsets as float32 (M, nblocks)."""
        return _meta_as_float(self.offset_raw)

    @property
    def logical_bytes(self) -> int:
        """MNN's count: packed codes plus one (scale, offset) pair per row and block."""
        from gemvbw.metrics import logical_bytes

        return logical_bytes(self.M, self.K, self.bits, self.block, self.meta_bytes)

    @property
    def nbytes(self) -> int:
        """Bytes really stored: codes (with last-block padding) and metadata."""
        return self.codes.nbytes + self.scale_raw.nbytes + self.offset_raw.nbytes

    def codes_unpacked(self, rows: slice = slice(None)) -> np.ndarray:
        """Integer codes as uint8 (rows, K)."""
        packed = self.codes[rows]
        n = packed.shape[0]
        nfull, last = divmod(self.K, self.block)
        bb = block_nbytes(self.block, self.bits)
        parts = []
        if nfull:
            full = packed[:, : nfull * bb].reshape(n, nfull, bb)
            parts.append(unpack_codes(full, self.bits, self.block).reshape(n, nfull * self.block))
        if last:
            tail = packed[:, nfull * bb:]
            parts.append(unpack_codes(tail, self.bits, padded_len(last, self.bits))[:, :last])
        return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]

    def dequantize(self, rows: slice = slice(None), dtype=np.float32) -> np.ndarray:
        """The weights the codes stand for, (rows, K), as ``dtype`` (float32 by default)."""
        q = self.codes_unpacked(rows).astype(dtype)
        scale = np.repeat(self.scale[rows].astype(dtype), self.block, axis=1)[:, : self.K]
        offset = np.repeat(self.offset[rows].astype(dtype), self.block, axis=1)[:, : self.K]
        return q * scale + offset


def _meta_as_float(raw: np.ndarray) -> np.ndarray:
    if raw.dtype == np.uint16:
        return raw.view(np.float16).astype(np.float32)
    return raw.astype(np.float32, copy=False)


def _store_meta(values: np.ndarray, meta_bytes: int) -> np.ndarray:
    if meta_bytes == 2:
        return values.astype(np.float16).view(np.uint16)
    return values.astype(np.float32)


FP16_MIN_NORMAL = 2.0 ** -14
FP16_SCALE_REL_ERR = 1e-2  # a stored scale this far off moves the largest code by a percent of the block range


def check_fp16_metadata(W: np.ndarray, lo: np.ndarray, hi: np.ndarray, scale: np.ndarray) -> None:
    """fp16 metadata must hold each block's offset (its min) and scale: beyond 65504 they would be infinite,
    and scales below fp16's normal range lose their precision (a block of tiny weights would dequantize to
    other weights). Refused, with the advice that works: fp32 metadata."""
    big = float(max(np.abs(lo).max(initial=0.0), np.abs(hi).max(initial=0.0)))
    if big > FP16_MAX:
        raise ValueError(f"weights up to |w| = {big:g} do not fit fp16 metadata (max {FP16_MAX:g}): the offsets "
                         "would be infinite; use meta_bytes=4 (fp32 scale and offset)")
    stored = scale.astype(np.float16).astype(np.float32)
    rel = np.abs(stored - scale) / scale
    worst = float(rel.max(initial=0.0))
    if worst > FP16_SCALE_REL_ERR:
        tiny = float(scale[np.unravel_index(int(rel.argmax()), rel.shape)])
        raise ValueError(f"a block's scale ({tiny:.3g}, below fp16's normal range {FP16_MIN_NORMAL:.3g}) is off by "
                         f"{100 * worst:.1f}% once stored as fp16, so its codes would mean other weights; "
                         "use meta_bytes=4 (fp32 scale and offset), or scale the weights up")


def check_format(M: int, K: int, bits: int, block: int, meta_bytes: int) -> None:
    """Raise ValueError when the format parameters are not supported."""
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")
    if meta_bytes not in SUPPORTED_META_BYTES:
        raise ValueError(f"meta_bytes must be 2 (float16) or 4 (float32), got {meta_bytes}")
    if block <= 0 or block % BLOCK_GRANULE:
        raise ValueError(f"block must be a positive multiple of {BLOCK_GRANULE}, got {block}")
    if M <= 0 or K <= 0:
        raise ValueError(f"M and K must be positive, got M={M}, K={K}")


def quantize(W: np.ndarray, bits: int = 4, block: int = 64, meta_bytes: int = 2) -> QuantizedMatrix | FloatMatrix:
    """Quantize a float (M, K) matrix with per-block min/max affine codes (bits 32 and 16: keep it as fp32 or
    fp16 weights, see :func:`float_matrix`).

    offset = block min, scale = (max - min) / (2**bits - 1), q = round((w - offset) / scale),
    computed with the *stored* (rounded) metadata so that ``|w - dequantized| <= scale/2``
    up to metadata rounding.
    """
    if bits in FLOAT_BITS:
        return float_matrix(W, bits)
    W = np.asarray(W, dtype=np.float32)
    if W.ndim != 2:
        raise ValueError(f"W must be 2-D (M, K), got shape {W.shape}")
    M, K = W.shape
    check_format(M, K, bits, block, meta_bytes)
    if not np.all(np.isfinite(W)):
        raise ValueError("W contains NaN or infinity")
    nb = num_blocks(K, block)
    pad = nb * block - K
    Wp = np.pad(W, ((0, 0), (0, pad)), mode="edge").reshape(M, nb, block)
    lo = Wp.min(axis=2)
    hi = Wp.max(axis=2)
    qmax = (1 << bits) - 1
    scale = (hi - lo) / qmax
    scale[scale == 0] = 1.0  # constant block: every code 0 reproduces it exactly
    if meta_bytes == 2:
        check_fp16_metadata(W, lo, hi, scale)
    scale_raw = _store_meta(scale, meta_bytes)
    offset_raw = _store_meta(lo, meta_bytes)
    s = _meta_as_float(scale_raw)[:, :, None]
    o = _meta_as_float(offset_raw)[:, :, None]
    q = np.clip(np.rint((Wp - o) / s), 0, qmax).astype(np.uint8).reshape(M, nb * block)[:, :K]
    return QuantizedMatrix(M, K, bits, block, meta_bytes, _pack_rows(q, bits, block), scale_raw, offset_raw)


def _pack_rows(q: np.ndarray, bits: int, block: int) -> np.ndarray:
    """Pack unpacked codes (M, K) row by row, block after block."""
    M, K = q.shape
    nfull, last = divmod(K, block)
    parts = []
    if nfull:
        full = q[:, : nfull * block].reshape(M, nfull, block)
        parts.append(pack_codes(full, bits).reshape(M, -1))
    if last:
        Lp = padded_len(last, bits)
        tail = np.zeros((M, Lp), dtype=np.uint8)
        tail[:, :last] = q[:, nfull * block:]
        parts.append(pack_codes(tail, bits))
    out = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    return np.ascontiguousarray(out)


def random_quantized(
    M: int, K: int, bits: int = 4, block: int = 64, meta_bytes: int = 2, seed: int = 0
) -> QuantizedMatrix | FloatMatrix:
    """A random packed matrix, generated directly in packed form (for bits 32 and 16, unquantized weights:
    :func:`random_float_matrix`; block and meta_bytes do not apply).

    No (M, K) float matrix is made, so an lm_head-sized matrix costs only its
    packed bytes. Scales are positive and offsets centre the codes around zero,
    so the weights look like a real layer's (|w| ~ 0.05).
    """
    if bits in FLOAT_BITS:
        return random_float_matrix(M, K, bits, seed)
    check_format(M, K, bits, block, meta_bytes)
    rng = np.random.default_rng(seed)
    nfull, last = divmod(K, block)
    bb = block_nbytes(block, bits)
    codes = np.empty((M, row_nbytes(K, bits, block)), dtype=np.uint8)
    if nfull:
        # every byte pattern is a valid set of full-block codes
        codes[:, : nfull * bb] = rng.integers(0, 256, size=(M, nfull * bb), dtype=np.uint8)
    if last:
        Lp = padded_len(last, bits)
        tail = np.zeros((M, Lp), dtype=np.uint8)
        tail[:, :last] = rng.integers(0, 1 << bits, size=(M, last), dtype=np.uint8)
        codes[:, nfull * bb:] = pack_codes(tail, bits)
    nb = num_blocks(K, block)
    qmax = (1 << bits) - 1
    scale = (0.1 / qmax) * rng.uniform(0.5, 1.5, size=(M, nb)).astype(np.float32)
    offset = -scale * (qmax / 2) * rng.uniform(0.8, 1.2, size=(M, nb)).astype(np.float32)
    return QuantizedMatrix(
        M, K, bits, block, meta_bytes, codes, _store_meta(scale, meta_bytes), _store_meta(offset, meta_bytes)
    )


def random_activations(K: int, seed: int = 0) -> np.ndarray:
    """A float32 activation vector x of length K."""
    return np.random.default_rng(seed + 1_000_003).standard_normal(K).astype(np.float32)


@dataclass(frozen=True, eq=False)
class FloatMatrix:
    """An M x K matrix of unquantized weights: fp32 (bits 32, float32 values) or fp16 (bits 16, the raw
    uint16 bits, converted inside the kernels as the quantized formats' metadata is). ``block`` is K and
    ``meta_bytes`` 0: a row is one block without scale or offset."""

    M: int
    K: int
    bits: int
    weights: np.ndarray

    block = property(lambda self: self.K)
    meta_bytes = 0

    @property
    def logical_bytes(self) -> int:
        from gemvbw.metrics import logical_bytes

        return logical_bytes(self.M, self.K, self.bits, self.K, 0)

    @property
    def nbytes(self) -> int:
        return self.weights.nbytes

    def dequantize(self, rows: slice = slice(None), dtype=np.float32) -> np.ndarray:
        w = self.weights[rows]
        return (w.view(np.float16) if self.bits == 16 else w).astype(dtype)


def float_matrix(W: np.ndarray, bits: int) -> FloatMatrix:
    """fp32 or fp16 weights from a float (M, K) matrix; fp16 refuses values it cannot hold."""
    W = np.asarray(W, dtype=np.float32)
    if W.ndim != 2:
        raise ValueError(f"W must be 2-D (M, K), got shape {W.shape}")
    if not np.all(np.isfinite(W)):
        raise ValueError("W contains NaN or infinity")
    if bits == 32:
        return FloatMatrix(W.shape[0], W.shape[1], 32, np.ascontiguousarray(W))
    if bits == 16:
        if W.size and np.abs(W).max() > FP16_MAX:
            raise ValueError(f"W has values beyond float16's range (|w| > {FP16_MAX:g}); use bits=32")
        return FloatMatrix(W.shape[0], W.shape[1], 16, W.astype(np.float16).view(np.uint16))
    raise ValueError(f"unquantized weights are bits 32 or 16, got {bits}")


def random_float_matrix(M: int, K: int, bits: int, seed: int = 0, rows_per_chunk: int = 256) -> FloatMatrix:
    """Random fp32 or fp16 weights (|w| ~ 0.02, like a real layer's), holding one full copy at most:
    fp32 is drawn in place, fp16 a chunk of rows at a time."""
    if M <= 0 or K <= 0:
        raise ValueError(f"M and K must be positive, got M={M}, K={K}")
    rng = np.random.default_rng(seed)
    if bits == 32:
        w = rng.standard_normal((M, K), dtype=np.float32)
        w *= np.float32(0.02)
        return FloatMatrix(M, K, 32, w)
    if bits != 16:
        raise ValueError(f"unquantized weights are bits 32 or 16, got {bits}")
    out = np.empty((M, K), np.uint16)
    for r0 in range(0, M, rows_per_chunk):
        chunk = rng.standard_normal((min(rows_per_chunk, M - r0), K), dtype=np.float32)
        chunk *= np.float32(0.02)
        out[r0:r0 + chunk.shape[0]] = chunk.astype(np.float16).view(np.uint16)
    return FloatMatrix(M, K, 16, out)
