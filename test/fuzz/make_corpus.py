#!/usr/bin/env python3
# make_corpus.py - writes the seed corpus for fuzz_ops.c into corpus/: small hand-built
# operation sequences that reach every operation and size range, so fuzzing and the
# replay test start from inputs that already exercise the interesting paths.
import os
import random
import sys

OP_MALLOC, OP_FREE, OP_REALLOC, OP_ALIGNED, OP_CALLOC, OP_CHECK, OP_FREE_SIZED, OP_BIG = range(8)


def size(cls, v):
    """Encodes a size: class 0..7 in the top bits of the first byte, 16-bit value after."""
    return bytes([(cls << 5) | (v & 31), (v >> 8) & 0xFF, v & 0xFF])


def op(code, slot, *rest):
    return bytes([code, slot]) + b"".join(rest)


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(out, exist_ok=True)
    seeds = {}

    # Many small blocks in every slot, then frees in a different order.
    b = b"".join(op(OP_MALLOC, s, size(s % 4, s * 37 + 1)) for s in range(32))
    b += b"".join(op(OP_FREE, (s * 7) % 32) for s in range(32))
    seeds["small_alloc_free"] = b

    # One object realloced up through every size class range and back down.
    b = op(OP_MALLOC, 0, size(0, 5))
    for cls in range(7):
        b += op(OP_REALLOC, 0, size(cls, 0xFFFF))
        b += op(OP_CHECK, 0)
    for cls in reversed(range(7)):
        b += op(OP_REALLOC, 0, size(cls, 0x1234))
    b += op(OP_REALLOC, 0, size(0, 0))  # realloc to zero
    seeds["realloc_ladder"] = b

    # Every alignment with the three aligned calls.
    b = b""
    for k in range(17):
        for how in range(3):
            b += op(OP_ALIGNED, (k * 3 + how) % 32, bytes([(k << 2) | how]), size(2, k * 61))
    b += op(OP_CHECK, 1)
    b += b"".join(op(OP_FREE_SIZED, s) for s in range(32))
    seeds["aligned_all"] = b

    # Zero-size and one-byte aligned requests, several alive at once per alignment.
    b = b""
    for k in range(17):
        for rep in range(4):
            how = rep % 3
            b += op(OP_ALIGNED, (k * 4 + rep) % 32, bytes([(k << 2) | how]), size(0, rep // 2))
        b += op(OP_CHECK, 0)
    seeds["aligned_zero"] = b

    # calloc after dirty frees of the same sizes.
    b = b""
    for s in range(16):
        b += op(OP_MALLOC, s, size(3, 4096 + s * 8))
        b += op(OP_CHECK, s)
    for s in range(16):
        b += op(OP_FREE, s)
    for s in range(16):
        b += op(OP_CALLOC, s, size(3, 4096 + s * 8))
    seeds["calloc_reuse"] = b

    # Huge blocks: allocate, grow, shrink into a small class, sized free.
    b = op(OP_BIG, 3, size(7, 10)) + op(OP_REALLOC, 3, size(6, 0xFFFF))
    b += op(OP_BIG, 4, size(7, 0x8000)) + op(OP_CHECK, 4) + op(OP_FREE_SIZED, 4)
    b += op(OP_REALLOC, 3, size(1, 100)) + op(OP_FREE, 3)
    seeds["huge"] = b

    # Around the largest class (256 KiB): class 5 values near 52428 * 5.
    b = b""
    for i, v in enumerate((52428, 52429, 52430, 52420, 40000)):
        b += op(OP_MALLOC, i, size(5, v)) + op(OP_CHECK, i)
    b += op(OP_REALLOC, 0, size(5, 52430)) + op(OP_REALLOC, 1, size(5, 52420))
    seeds["largest_class"] = b

    # Deterministic random inputs.
    rng = random.Random(20240101)
    for i in range(4):
        seeds["random_%d" % i] = bytes(rng.randrange(256) for _ in range(64 + 200 * i))

    for name, data in sorted(seeds.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("wrote %d seed files to %s" % (len(seeds), out), file=sys.stderr)


if __name__ == "__main__":
    main()
