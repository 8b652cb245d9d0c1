"""CTR data for PICASSO: field specs, jagged batches, a Zipf generator and Criteo TSV / Parquet readers.

A batch is named once (:class:`JaggedBatch`, TorchRec's ``KeyedJaggedTensor`` shape: ids of all
fields concatenated field-major, one length per (field, sample)) and every embedding module, per
field or packed, takes that same batch. Modules: :mod:`.specs`, :mod:`.batch`, :mod:`.generators`,
:mod:`.readers`; their public names are importable from here.
"""

from __future__ import annotations

from labkit.recsys.data.specs import (N_CAT_CRITEO, N_DENSE_CRITEO, OUT_OF_RANGE, POOLINGS, FieldSpec, check_lr,
                                      check_specs, criteo_field_specs, criteo_like_cardinalities, load_field_specs,
                                      make_fields, save_field_specs)
from labkit.recsys.data.batch import BadBatch, JaggedBatch, check_fits, check_ids, hash_ids
from labkit.recsys.data.generators import SyntheticCTR, ZipfSampler
from labkit.recsys.data.readers import (BAD_SHARE_WINDOW, MalformedRow, ReadStats, SkippedRowsWarning, TooManyBadRows,
                                        category_key, read_criteo_parquet, read_criteo_tsv, write_criteo_tsv)

__all__ = ["POOLINGS", "OUT_OF_RANGE", "N_DENSE_CRITEO", "N_CAT_CRITEO", "FieldSpec", "make_fields", "check_lr",
           "check_specs", "criteo_like_cardinalities", "save_field_specs", "load_field_specs", "criteo_field_specs",
           "JaggedBatch", "BadBatch", "check_ids", "check_fits", "hash_ids", "ZipfSampler", "SyntheticCTR",
           "MalformedRow", "SkippedRowsWarning", "ReadStats", "category_key", "BAD_SHARE_WINDOW", "TooManyBadRows",
           "read_criteo_tsv", "read_criteo_parquet", "write_criteo_tsv"]
