"""The table-name rule, derived table names and index names.

**Names.** Table names are lower case `[a-z_][a-z0-9_]*` of at most 63 bytes
(PostgreSQL would truncate longer ones silently, and fold or quote mixed case
depending on how it is written). Index names end in `_embedding_hnsw`, which
no table name may, so they never collide. Messages name the target, never a
password (`redact`).
"""

import hashlib
import re

DATASETS_TABLE = "beam_image_pipeline_datasets"
MAX_NAME_BYTES = 63
INDEX_SUFFIX = "_embedding_hnsw"
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


class TableNameError(ValueError):
    """A table name that breaks the naming rule; the message says which rule."""


def check_table_name(name):
    """Returns `name` if it is a valid table name; raises TableNameError saying why not."""
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise TableNameError(f"table name {name[:80]!r} is {len(name.encode('utf-8'))} bytes long; PostgreSQL "
                             f"keeps at most {MAX_NAME_BYTES}: choose a shorter --table")
    if not _NAME.match(name):
        raise TableNameError(f"table name {name[:80]!r} must be lower case letters, digits and '_', not starting "
                             "with a digit (PostgreSQL folds or quotes other names depending on how they are "
                             "written, so one name could mean two tables)")
    if name.endswith(INDEX_SUFFIX) or name == DATASETS_TABLE:
        raise TableNameError(f"table name {name!r} is reserved: names ending in {INDEX_SUFFIX!r} are the "
                             f"project's index names, and {DATASETS_TABLE} its record of what tables hold")
    return name


def _short_hash(text, length=8):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def table_name(text):
    """A valid table name derived from free text (e.g. the output folder's name); long ones end in a hash."""
    name = re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_") or "images"
    if name[0].isdigit():
        name = f"t_{name}"
    if name.endswith(INDEX_SUFFIX) or name == DATASETS_TABLE:
        name = f"{name}_t"
    if len(name) > MAX_NAME_BYTES:
        name = f"{name[:MAX_NAME_BYTES - 9]}_{_short_hash(text)}"
    return check_table_name(name)


def index_name(table):
    """The HNSW index's name for `table`: never a valid table name, so never equal to one."""
    if len(table) + len(INDEX_SUFFIX) <= MAX_NAME_BYTES:
        return f"{table}{INDEX_SUFFIX}"
    keep = MAX_NAME_BYTES - len(INDEX_SUFFIX) - 9
    return f"{table[:keep]}_{_short_hash(table)}{INDEX_SUFFIX}"
