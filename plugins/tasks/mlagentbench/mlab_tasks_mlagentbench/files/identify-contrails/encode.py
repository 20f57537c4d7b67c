"""Run-length encoding of binary masks, in the competition's submission format."""
import numpy as np


def rle_encode(x, fg_val=1):
    """x: [height, width] array, 1 = mask. Returns [start, length, start, length, ...] with 1-based starts,
    numbering pixels top to bottom, then left to right (column-major)."""
    dots = np.where(x.T.flatten() == fg_val)[0]
    run_lengths = []
    prev = -2
    for b in dots:
        if b > prev + 1:
            run_lengths.extend((b + 1, 0))
        run_lengths[-1] += 1
        prev = b
    return run_lengths


def list_to_string(x):
    """[1, 3, 10, 5] -> '1 3 10 5'; an empty list -> '-'."""
    return " ".join(str(int(v)) for v in x) if x else "-"


def rle_decode(mask_rle, shape=(256, 256)):
    """'1 3 10 5' (or '-' for nothing) -> [height, width] uint8 array, 1 = mask."""
    img = np.zeros(shape[0] * shape[1], dtype=np.uint8)
    if mask_rle != "-":
        s = mask_rle.split()
        starts, lengths = [np.asarray(x, dtype=int) for x in (s[0::2], s[1::2])]
        starts -= 1
        for lo, hi in zip(starts, starts + lengths):
            img[lo:hi] = 1
    return img.reshape(shape, order="F")
