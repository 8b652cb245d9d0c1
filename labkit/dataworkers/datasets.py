"""Seeded synthetic data for the GoldMiner workloads: a JPEG image set and raw CTR rows."""

from __future__ import annotations

import io

import numpy as np

from labkit.core.datasets import DatasetWriter, register_dataset

N_CLASSES = 10


def _jpeg(rng: np.random.Generator, size: int, label: int, quality: int) -> bytes:
    """Return one JPEG: a smooth random scene tinted by its class, plus sensor-like noise."""
    from PIL import Image

    coarse = rng.integers(0, 256, (size // 16, size // 16, 3)).astype(np.float32)
    # The class shows as a colour cast so that a model can learn something real from the pixels.
    tint = np.array([np.cos(label * 0.63), np.sin(label * 1.1), np.cos(label * 2.3)], np.float32) * 60
    coarse = np.clip(coarse * 0.7 + 40 + tint, 0, 255).astype(np.uint8)
    img = Image.fromarray(coarse).resize((size, size), Image.BICUBIC)
    arr = np.asarray(img).astype(np.int16) + rng.integers(-18, 19, (size, size, 3), dtype=np.int16)
    buf = io.BytesIO()
    Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


@register_dataset(
    "dw_jpeg", system="dataworkers",
    description="synthetic JPEG photos (smooth scenes + noise, class = colour cast), packed in one file",
    profiles={"ci": {"images": 96, "size": 128, "quality": 90},
              "small": {"images": 1024, "size": 256, "quality": 90},
              "large": {"images": 8192, "size": 384, "quality": 90}},
    seed=404)
def build_jpeg(w: DatasetWriter, p: dict) -> None:
    """Write `images` JPEGs back to back in jpegs.bin with their offsets and labels."""
    rng = w.rng(0)
    labels = rng.integers(0, N_CLASSES, p["images"]).astype(np.int64)
    offsets = np.zeros(p["images"] + 1, np.int64)
    with w.stream("jpegs", np.uint8) as s:
        for i, lab in enumerate(labels):
            data = _jpeg(w.rng(1000 + i), p["size"], int(lab), p["quality"])
            s.append(np.frombuffer(data, np.uint8))
            offsets[i + 1] = offsets[i] + len(data)
    w.array("offsets", offsets)
    w.array("labels", labels)
    w.meta.update(size=p["size"], classes=N_CLASSES)


# Raw CTR rows: string-valued categorical fields (fixed-width bytes, as they arrive in logs),
# float-valued dense fields, and a click label that depends on both.
CAT_FIELDS = 8
DENSE_FIELDS = 4
CAT_WIDTH = 16


@register_dataset(
    "dw_ctr", system="dataworkers",
    description="raw CTR log rows: 8 string categorical fields, 4 dense floats, click label",
    profiles={"ci": {"rows": 4096}, "small": {"rows": 65536}, "large": {"rows": 1 << 20}},
    seed=405)
def build_ctr(w: DatasetWriter, p: dict) -> None:
    """Write string categories (|S16), dense floats and labels for `rows` log lines."""
    rng = w.rng(0)
    n = p["rows"]
    # Zipf-like popularity per field, the skew real click logs have.
    vocab = [int(v) for v in np.geomspace(50, 200_000, CAT_FIELDS)]
    ids = np.stack([np.minimum(rng.zipf(1.3, n), v) - 1 for v in vocab], axis=1)
    cats = np.char.add(np.array([f"f{j}_" for j in range(CAT_FIELDS)])[None, :],
                       ids.astype("U12")).astype(f"S{CAT_WIDTH}")
    dense = rng.lognormal(0.0, 1.5, (n, DENSE_FIELDS)).astype(np.float32)
    logit = -1.5 + 0.8 * (ids[:, 0] % 3 == 0) + 0.3 * np.log1p(dense[:, 0]) - 0.4 * (ids[:, 1] % 5 == 1)
    labels = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    w.array("cats", cats)
    w.array("dense", dense)
    w.array("labels", labels)
    w.meta.update(cat_fields=CAT_FIELDS, dense_fields=DENSE_FIELDS)
