"""Per-target primitives of the int8 kernels: one class per tier (see gemvbw.tiers for the gate).

Each class gives, as LLVM IR emitted at compile time:

- ``dot(builder, terms, code_max)``: the products of (codes, activations) vector pairs summed into
  int32 lanes, each lane the sum of four neighbouring bytes' products (the codes are 0..code_max,
  or signed w8 codes when code_max is None);
- ``reduce4(builder, parts)``: four rows' partials -> <8 x i32> [4 rows x block 2q | 4 rows x 2q+1];

and the facts the layout depends on: ``vector_bytes``, how w8 codes are stored (``w8_codes``),
whether codes may be signed (``signed_codes``), and the prefetch distance per width. The kernel
skeleton and each width's unpacking (gemvbw.kernels.packed) are written once against these.
Importing a tier's class compiles nothing; only calling a kernel with its tag does, and the
registry does that only for tiers gemvbw.tiers found usable.
"""

from __future__ import annotations

from gemvbw.kernels.isa.neon import Neon, NeonDotprod
from gemvbw.kernels.isa.x86 import Avx2, Avx512Bw, AvxVnni, Vnni, Vnni512

PRIMITIVES = {p.tier: p() for p in (Vnni512, Vnni, AvxVnni, Avx512Bw, Avx2, NeonDotprod, Neon)}
