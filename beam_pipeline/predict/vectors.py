"""Post-processing of what a model returns, a batch at a time: unit-length embeddings and the top-k classes.

Pure NumPy, deterministic: the same scores and embeddings give the same bytes.
"""

import numpy as np

from beam_pipeline.common.embeddings import l2_normalize


def top_k(scores, k):
    """(ids int32 [B, k'], scores float32 [B, k']) of each row's k highest scores, k' = min(k, classes).

    Ties go to the lower class id, so the order never depends on the sort's implementation.
    """
    scores = np.asarray(scores, np.float32)
    if scores.ndim == 1:
        scores = scores[:, None]
    k = min(k, scores.shape[1])
    ids = np.argsort(-scores, axis=1, kind="stable")[:, :k].astype(np.int32)
    return ids, np.take_along_axis(scores, ids, axis=1)


def postprocess(scores, embeddings, k, dtype="float32"):
    """A batch's model outputs -> (top ids, top scores, embeddings unit-length in `dtype`).

    `embeddings` may be None (an export without an embedding output); then so is the result's.
    """
    ids, values = top_k(scores, k)
    if embeddings is None:
        return ids, values, None
    return ids, values, l2_normalize(embeddings).astype(dtype)
