"""Seeded generators for the lite tasks' data.

The tasks once split scikit-learn's bundled datasets, so agent code could look the test labels up in sklearn's own
copy. These generators make new data from the task's seed alone: the test labels exist only in the hidden folder.
Each returns (feature names, X, y) as numpy arrays; the same seed gives the same arrays.
"""
from __future__ import annotations

import math

# ---- digits: procedurally drawn 8x8 digit images ---------------------------------------------------------------

def _arc(cx, cy, rx, ry, start, stop, points=14):
    """Points on an elliptic arc; angles in degrees, 90 at the top (image y grows downwards)."""
    out = []
    for k in range(points + 1):
        a = math.radians(start + (stop - start) * k / points)
        out.append((cx + rx * math.cos(a), cy - ry * math.sin(a)))
    return out


# Each digit is a few strokes (polylines) in a unit square, x to the right, y down.
_STROKES = {
    0: [_arc(0.5, 0.5, 0.27, 0.4, 0, 360, 20)],
    1: [[(0.33, 0.27), (0.55, 0.1), (0.55, 0.9)]],
    2: [_arc(0.5, 0.32, 0.24, 0.22, 160, -30) + [(0.25, 0.9), (0.78, 0.9)]],
    3: [_arc(0.5, 0.3, 0.22, 0.2, 150, -90, 10) + _arc(0.5, 0.7, 0.25, 0.2, 90, -150, 10)],
    4: [[(0.65, 0.9), (0.65, 0.1), (0.2, 0.65), (0.82, 0.65)]],
    5: [[(0.75, 0.1), (0.32, 0.1), (0.29, 0.46)] + _arc(0.5, 0.66, 0.25, 0.24, 125, -150, 12)],
    6: [[(0.66, 0.1), (0.36, 0.42), (0.28, 0.68)], _arc(0.5, 0.68, 0.22, 0.22, 0, 360, 16)],
    7: [[(0.22, 0.1), (0.78, 0.1), (0.42, 0.9)]],
    8: [_arc(0.5, 0.29, 0.19, 0.19, 0, 360, 16), _arc(0.5, 0.7, 0.24, 0.21, 0, 360, 16)],
    9: [_arc(0.5, 0.32, 0.22, 0.22, 0, 360, 16), [(0.72, 0.32), (0.6, 0.9)]],
}
_CANVAS = 32  # drawn at 32x32, then averaged over 4x4 blocks, as the scanned UCI digits were


def _segments(digit: int):
    import numpy as np

    segs = [(a, b) for stroke in _STROKES[digit] for a, b in zip(stroke[:-1], stroke[1:], strict=False)]
    return np.array(segs, dtype=np.float64)  # (S, 2 ends, 2 coordinates)


def _render(segs, thickness, canvas_points):
    """Ink in [0, 1] at each canvas point of each image: full within `thickness` of a stroke, fading over one pixel
    beyond. segs is (images, S, 2 ends, 2 coordinates), thickness (images,); returns (images, points)."""
    import numpy as np

    # x and y apart: a sum over a last axis of 2 runs a numpy loop of 2 per element (the whole took 4x as long)
    ax, ay = segs[:, None, :, 0, 0], segs[:, None, :, 0, 1]
    abx, aby = segs[:, None, :, 1, 0] - ax, segs[:, None, :, 1, 1] - ay
    length2 = np.maximum(abx * abx + aby * aby, 1e-12)
    px, py = canvas_points[None, :, None, 0], canvas_points[None, :, None, 1]
    t = np.clip(((px - ax) * abx + (py - ay) * aby) / length2, 0.0, 1.0)
    dx, dy = px - (ax + t * abx), py - (ay + t * aby)
    dist = np.sqrt(dx ** 2 + dy ** 2).min(axis=2)
    return np.clip((thickness[:, None] - dist) * _CANVAS + 1.0, 0.0, 1.0)


def digits(seed: int, n: int = 1797, label_noise: float = 0.02):
    """8x8 images with values 0..16: each class's strokes under a random affine map, a smooth random warp,
    random stroke width and pixel noise; a few labels are flipped, so no model is perfect."""
    import numpy as np

    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % 10)
    centers = (np.arange(_CANVAS) + 0.5) / _CANVAS
    gx, gy = np.meshgrid(centers, centers)
    canvas_points = np.stack([gx.ravel(), gy.ravel()], axis=1)
    templates = {d: _segments(d) for d in range(10)}
    # The draws stay in their per-image order (the same seed gives the same data); the drawing is batched by digit
    # (one segment count), a loop of small numpy calls per image having cost ~3 CPU-s a prepare.
    strokes, widths, noise = [], np.empty(n), np.empty((n, 8, 8))
    for i, digit in enumerate(y):
        p = templates[int(digit)] - 0.5
        angle = rng.normal(0.0, 0.15)
        scale = rng.uniform(0.75, 1.1, size=2)
        shear = rng.normal(0.0, 0.15)
        c, s = math.cos(angle), math.sin(angle)
        m = np.array([[c, -s], [s, c]]) @ np.array([[scale[0], shear], [0.0, scale[1]]])
        p = p @ m.T
        # A smooth warp: two low-frequency waves bend the strokes the way hands do.
        k = rng.normal(0.0, 5.0, size=(2, 2))
        phase = rng.uniform(0, 2 * math.pi, size=2)
        amp = rng.uniform(0.0, 0.05, size=2)
        p = p + amp * np.sin(p @ k.T + phase)
        p = p + 0.5 + rng.normal(0.0, 0.05, size=2)
        strokes.append(p.reshape(-1, 2, 2))
        widths[i] = rng.uniform(0.03, 0.09)
        noise[i] = rng.normal(0.0, 0.7, size=(8, 8))
    ink = np.empty((n, _CANVAS * _CANVAS))
    for digit in range(10):
        rows = np.flatnonzero(y == digit)
        chunk = max(1, 256 // len(templates[digit]))  # images a batch: each array about 2 MB, in cache
        for start in range(0, len(rows), chunk):
            batch = rows[start:start + chunk]
            ink[batch] = _render(np.stack([strokes[i] for i in batch]), widths[batch], canvas_points)
    X = np.empty((n, 64))
    for i in range(n):
        blocks = ink[i].reshape(8, 4, 8, 4).mean(axis=(1, 3)) * 16.0 + noise[i]
        X[i] = np.clip(np.rint(blocks), 0, 16).ravel()
    flip = rng.random(n) < label_noise
    y = np.where(flip, (y + rng.integers(1, 10, size=n)) % 10, y)
    return [f"pixel{i}" for i in range(64)], X, y


# ---- wine: a three-class chemical analysis ------------------------------------------------------------------------

WINE_FEATURES = [
    "alcohol", "malic_acid", "ash", "alcalinity_of_ash", "magnesium", "total_phenols", "flavanoids",
    "nonflavanoid_phenols", "proanthocyanins", "color_intensity", "hue", "od280/od315_of_diluted_wines", "proline",
]
# (mean, spread, decimals) of each measurement, a plausible range for a chemical analysis of wine
_WINE_SCALE = [
    (13.0, 0.8, 2), (2.3, 1.1, 2), (2.37, 0.27, 2), (19.5, 3.3, 1), (100.0, 14.0, 0), (2.3, 0.63, 2),
    (2.0, 1.0, 2), (0.36, 0.12, 2), (1.6, 0.57, 2), (5.0, 2.3, 2), (0.96, 0.23, 3), (2.6, 0.7, 2),
    (750.0, 315.0, 0),
]


def wine(seed: int, n: int = 178, label_noise: float = 0.03):
    """Three classes as Gaussian clusters in a 3-d latent space; each measurement mixes the latent factors
    (so several are redundant), some are almost pure noise, and a few labels are flipped. The widest-ranged
    measurements (proline, magnesium) carry little of the class, so unscaled distances mislead."""
    import numpy as np

    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % 3)
    means = 1.8 * np.array([[1.6, 0.4, -0.9], [-1.5, 0.9, 0.6], [0.2, -1.6, 0.3]])
    latent = means[y] + rng.normal(0.0, 1.0, size=(n, 3))
    # loadings: rows are measurements, columns latent factors; rows of zeros are noise measurements
    loadings = rng.normal(0.0, 1.0, size=(13, 3)) * rng.uniform(0.2, 1.0, size=(13, 1))
    loadings[[2, 4, 7]] *= 0.1  # ash, magnesium, nonflavanoid_phenols: mostly noise
    loadings[12] = [0.45, 0.0, 0.0]  # proline: weak, but the largest numbers
    raw = latent @ loadings.T + rng.normal(0.0, 0.6, size=(n, 13))
    raw = (raw - raw.mean(axis=0)) / raw.std(axis=0)
    X = np.empty((n, 13))
    for j, (mean, spread, decimals) in enumerate(_WINE_SCALE):
        X[:, j] = np.round(np.maximum(mean + spread * raw[:, j], mean * 0.2), decimals)
    flip = rng.random(n) < label_noise
    y = np.where(flip, (y + rng.integers(1, 3, size=n)) % 3, y)
    return list(WINE_FEATURES), X, y


# ---- diabetes: disease progression from ten baseline measurements -------------------------------------------------

DIABETES_FEATURES = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]


def diabetes(seed: int, n: int = 442, noise: float = 52.0):
    """Correlated measurements on realistic scales; the target is a nonlinear function of bmi, bp, s5 and s3
    plus a large noise, clipped to 25..346 and rounded to whole numbers."""
    import numpy as np

    rng = np.random.default_rng(seed)
    # standard-normal factors: bmi, bp and s5 rise together; s1/s2 and s3/s4 are coupled pairs
    z = rng.normal(size=(n, 8))
    bmi = z[:, 0]
    bp = 0.4 * bmi + 0.92 * z[:, 1]
    s5 = 0.45 * bmi + 0.3 * bp + 0.84 * z[:, 2]
    s1 = z[:, 3]
    s2 = 0.9 * s1 + 0.44 * z[:, 4]
    s3 = -0.35 * s5 + 0.94 * z[:, 5]
    s4 = -0.7 * s3 + 0.3 * s5 + 0.6 * z[:, 6]
    s6 = 0.35 * s5 + 0.3 * bmi + 0.88 * z[:, 7]
    age = np.clip(np.rint(49 + 13 * rng.normal(size=n) + 3 * bp), 19, 79)
    sex = rng.integers(1, 3, size=n).astype(float)
    X = np.stack([
        age, sex, np.round(26.4 + 4.4 * bmi, 1), np.round(94.6 + 13.8 * bp, 2), np.rint(189 + 34 * s1),
        np.round(115.4 + 30.4 * s2, 1), np.rint(49.8 + 12.9 * s3), np.round(np.clip(4.07 + 1.29 * s4, 2, 9.1), 2),
        np.round(4.64 + 0.52 * s5, 4), np.rint(91 + 11.5 * s6),
    ], axis=1)
    signal = (150 + 30 * bmi + 14 * bp + 28 * s5 - 10 * s3 + 9 * bmi * s5 + 7 * np.maximum(bmi, 0) ** 2
              - 6 * (sex - 1.5))
    y = np.clip(np.rint(signal + rng.normal(0.0, noise, size=n)), 25, 346)
    return list(DIABETES_FEATURES), X, y
