"""Draw minibatches without replacement in O(1) per index.

A step needs up to ``N`` distinct indices, taken ``m`` at a time, in a random order
that is fresh every step. Materialising a permutation of ``N`` would cost O(N) per
step, which defeats the purpose of a minibatch test, so positions ``0, 1, 2, ...``
are mapped through a keyed pseudo-random bijection of ``[0, N)``: a 4-round
Feistel network on the smallest power of two ``>= N`` with cycle walking (fewer
than two evaluations per index on average). The
i-th index of the step's minibatch sequence is ``permuted_index(key, i, N)``;
indices ``0..b-1`` are therefore always distinct.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_ROUNDS = 4
MAX_DATA = 2**31 - 1
"""Largest data-set size the uint32 Feistel network supports."""
KEYED_ROWS = 1_000_000
"""From this many rows up, a one-off draw of distinct rows (the warm-up's subsample, the influence probes' bulk rows) takes
the head of the keyed bijection below, in time and memory O(rows drawn), instead of the head of a permutation of all
``N`` (a sort of ``N`` keys: 19 CPU s and GBs of memory at 10^7 rows, about 1.5 CPU s at 10^6)."""


def _domain_bits(n: int) -> int:
    """Bits of the Feistel domain ``[0, 2**bits)``: the smallest power of two >= ``n`` (at least 2 bits)."""
    return max(2, int(n - 1).bit_length())


def _mix(x: jax.Array, round_key: jax.Array) -> jax.Array:
    """Keyed 32-bit integer hash (murmur3 finaliser) used as the Feistel round function."""
    x = x ^ round_key
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    x = x ^ (x >> 16)
    return x


def _feistel(x: jax.Array, round_keys: jax.Array, bits: int) -> jax.Array:
    """A 4-round (possibly unbalanced) Feistel bijection on ``[0, 2**bits)``.

    The state is split into a left part of ``a`` bits and a right part of ``b = bits - a`` bits;
    each round maps ``(L, R) -> (R, L xor F(R))``, which swaps the part sizes, so after an even
    number of rounds the layout is the original one. Every round is invertible, hence so is the map.
    """
    a = bits // 2
    sizes = (a, bits - a)
    left = x >> sizes[1]
    right = x & jnp.uint32((1 << sizes[1]) - 1)
    left_bits = sizes[0]
    for r in range(_ROUNDS):
        mask_left = jnp.uint32((1 << left_bits) - 1)
        new_right = left ^ (_mix(right, round_keys[r]) & mask_left)
        left, right = right, new_right
        left_bits = bits - left_bits
    return (left << jnp.uint32(bits - left_bits)) | right


def permuted_index(key: jax.Array, i: jax.Array, n: int, round_keys: jax.Array | None = None) -> jax.Array:
    """Position ``i`` of a key-dependent random permutation of ``[0, n)`` (int32).

    ``round_keys`` (4 uint32 values) may be given instead of deriving them from ``key``.
    """
    if n < 1 or n > MAX_DATA:
        raise ValueError(f"data size n={n} is outside the supported range [1, {MAX_DATA}]")
    bits = _domain_bits(n)
    if round_keys is None:
        round_keys = jax.random.bits(key, (_ROUNDS,), dtype=jnp.uint32)
    x0 = jnp.asarray(i).astype(jnp.uint32)
    bound = jnp.uint32(n)
    if n == 1 << bits:
        return _feistel(x0, round_keys, bits).astype(jnp.int32)

    def walk(x: jax.Array) -> jax.Array:
        y = _feistel(x, round_keys, bits)
        return jax.lax.while_loop(lambda v: v >= bound, lambda v: _feistel(v, round_keys, bits), y)

    flat = x0.reshape(-1)
    out = jax.vmap(walk)(flat)
    return out.reshape(x0.shape).astype(jnp.int32)


def chunk_indices(
    key: jax.Array, chunk: jax.Array, m: int, n: int, round_keys: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """Indices of the ``chunk``-th block of ``m`` in the step's permutation, and a validity mask.

    Positions past ``n`` (a last, partial chunk) are masked out and clamped to a valid index.
    """
    pos = chunk * m + jnp.arange(m, dtype=jnp.int32)
    valid = pos < n
    idx = permuted_index(key, jnp.where(valid, pos, 0), n, round_keys)
    return idx, valid
