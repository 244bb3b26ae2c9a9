"""The quality job's output contract: the columns of its Parquet files (README "Quality").

The quality job writes these schemas and the UI reads them: one owner, so a column renamed or added
here reaches both (as `common/predictions.py` is for the predict job's shards). File names are
`tf_serving_input.layout.QualityLayout`'s.
"""

from __future__ import annotations

import pyarrow as pa

GROUP_SCHEMA = pa.schema([
    ("group", pa.int64()), ("key", pa.string()), ("source", pa.string()), ("split", pa.string()),
    ("label", pa.string()), ("match", pa.string()), ("distance", pa.int32()), ("group_size", pa.int32()),
    ("group_match", pa.string()), ("leak", pa.bool_()), ("label_conflict", pa.bool_()),
    ("clean_split", pa.string()),
])
# The numbers each flagged image is judged by, beside its flags.
FLAG_NUMBERS = ("brightness", "contrast", "blur")
FLAG_SCHEMA = pa.schema([
    ("key", pa.string()), ("source", pa.string()), ("split", pa.string()), ("label", pa.string()),
    ("flags", pa.list_(pa.string())), *((name, pa.float32()) for name in FLAG_NUMBERS),
])
LABEL_ERROR_SCHEMA = pa.schema([
    ("key", pa.string()), ("source", pa.string()), ("split", pa.string()), ("label", pa.string()),
    ("neighbour_label", pa.string()), ("share", pa.float32()), ("neighbours", pa.int32()),
])
