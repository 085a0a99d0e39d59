#!/usr/bin/env python3
"""A checkpoint for test/run/transposed-source.test: one matrix W [K, N]
(K = 150, N = 70) stored several ways, so that every `^T` source of
transposed.amkir, read right, gives the buffer W^T [N, K] that the tensor
`wt` (W transposed by this script) gives untransposed.

  transposed_checkpoint.py UTILS_DIR OUT_DIR

  table    [N, K]   the embedding table (one row per token)
  w        [K, N]   W                        read as w^T
  w16      [K, N]   W in BF16                read as w16^T (converted to f32)
  big      [170, 80] W at rows 10.., cols 5.. read as big[10:160, 5:75]^T
  rows     [170, N] W at rows 10..           read as rows[10:160]^T
  cols     [K, 80]  W at columns 5..         read as cols[:, 5:75]^T
  wa, wb   [K, 30], [K, 40]  W's columns     read as wa^T+wb^T (stacked)
  wt       [N, K]   W^T, the reference
  vec      [K]      rank 1, and cube [2, 3, 25] rank 3: refused with ^T

Values are multiples of 1/16 in [-0.5, 0.5] (exact in BF16); the padding
around W in big, rows and cols has other values, so an offset read wrong
changes the logits. Python standard library only."""
import os
import sys

sys.path.insert(0, sys.argv[1])
from make_safetensors import encode, write_safetensors  # noqa: E402

K, N = 150, 70


def scrambled(i, j, salt):
    """One of 17 values, with no period in i or j (a periodic W would hide
    a transpose read off by a period)."""
    h = (i * 2654435761 + j * 40503 + i * j * 97 + salt) & 0xFFFFFFFF
    return (((h >> 13) % 17) - 8) / 16.0


def weight(i, j):
    return scrambled(i, j, 0)


def padding(i, j):
    return scrambled(i, j, 12345)


def matrix(rows, cols, at):
    return [at(i, j) for i in range(rows) for j in range(cols)]


def window(rows, cols, row0, col0):
    """A rows x cols matrix holding W at (row0, col0), padding elsewhere."""
    def at(i, j):
        if row0 <= i < row0 + K and col0 <= j < col0 + N:
            return weight(i - row0, j - col0)
        return padding(i, j)
    return matrix(rows, cols, at)


def tensor(name, shape, values, dtype="F32"):
    return (name, dtype, shape, encode(values, dtype))


def main():
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    tensors = [
        tensor("table", (N, K), matrix(N, K, lambda v, k: scrambled(v, k, 777))),
        tensor("w", (K, N), matrix(K, N, weight)),
        tensor("w16", (K, N), matrix(K, N, weight), "BF16"),
        tensor("big", (170, 80), window(170, 80, 10, 5)),
        tensor("rows", (170, N), window(170, N, 10, 0)),
        tensor("cols", (K, 80), window(K, 80, 0, 5)),
        tensor("wa", (K, 30), matrix(K, 30, weight)),
        tensor("wb", (K, 40), matrix(K, 40, lambda i, j: weight(i, j + 30))),
        tensor("wt", (N, K), matrix(N, K, lambda j, i: weight(i, j))),
        tensor("vec", (K,), [weight(0, j) for j in range(K)]),
        tensor("cube", (2, 3, 25), [weight(0, j) for j in range(150)]),
    ]
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)


if __name__ == "__main__":
    main()
