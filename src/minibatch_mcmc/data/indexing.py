"""Draw minibatches without replacement in O(1) per index.

A step needs up to ``N`` distinct indices, taken ``m`` at a time, in a random order
that is fresh every step. Materialising a permutation of ``N`` would cost O(N) per
step, which defeats the purpose of a minibatch test, so positions ``0, 1, 2, ...``
are mapped through a keyed pseudo-random bijection of ``[0, N)``: a 4-round
balanced Feistel network on ``2k`` bits (``4**k >= N``) with cycle walking. The
i-th index of the step's minibatch sequence is ``permuted_index(key, i, N)``;
indices ``0..b-1`` are therefore always distinct.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_ROUNDS = 4
MAX_DATA = 2**31 - 1
"""Largest data-set size the uint32 Feistel network supports."""


def _half_bits(n: int) -> int:
    """Bits per Feistel half so that the domain 4**k covers ``n`` (k >= 1)."""
    k = 1
    while 4**k < n:
        k += 1
    return k


def _mix(x: jax.Array, round_key: jax.Array) -> jax.Array:
    """Keyed 32-bit integer hash (murmur3 finaliser) used as the Feistel round function."""
    x = x ^ round_key
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    x = x ^ (x >> 16)
    return x


def _feistel(x: jax.Array, round_keys: jax.Array, k: int) -> jax.Array:
    """One pass of the balanced Feistel bijection on ``[0, 4**k)``."""
    mask = jnp.uint32((1 << k) - 1)
    left = (x >> k) & mask
    right = x & mask
    for r in range(_ROUNDS):
        left, right = right, left ^ (_mix(right, round_keys[r]) & mask)
    return (left << k) | right


def permuted_index(key: jax.Array, i: jax.Array, n: int) -> jax.Array:
    """Position ``i`` of a key-dependent random permutation of ``[0, n)`` (int32)."""
    if n < 1 or n > MAX_DATA:
        raise ValueError(f"data size n={n} is outside the supported range [1, {MAX_DATA}]")
    k = _half_bits(n)
    round_keys = jax.random.bits(key, (_ROUNDS,), dtype=jnp.uint32)
    x0 = jnp.asarray(i).astype(jnp.uint32)
    bound = jnp.uint32(n)

    def walk(x: jax.Array) -> jax.Array:
        y = _feistel(x, round_keys, k)
        return jax.lax.while_loop(lambda v: v >= bound, lambda v: _feistel(v, round_keys, k), y)

    flat = x0.reshape(-1)
    out = jax.vmap(walk)(flat)
    return out.reshape(x0.shape).astype(jnp.int32)


def chunk_indices(key: jax.Array, chunk: jax.Array, m: int, n: int) -> tuple[jax.Array, jax.Array]:
    """Indices of the ``chunk``-th block of ``m`` in the step's permutation, and a validity mask.

    Positions past ``n`` (a last, partial chunk) are masked out and clamped to a valid index.
    """
    pos = chunk * m + jnp.arange(m, dtype=jnp.int32)
    valid = pos < n
    idx = permuted_index(key, jnp.where(valid, pos, 0), n)
    return idx, valid
