"""Where each stored image is: key -> (shard file, byte offset), built once when the UI starts.

A request then reads one record (seek, one frame, its CRCs checked) instead of
scanning shards, and no path ever comes from a request: a key is looked up in
this dict, and only the shard files the job's manifest lists are opened.
"""

from __future__ import annotations

import dataclasses
import functools
import io

from beam_pipeline.common.records import parse_example, read_records_at
from tf_serving_input import features
from tf_serving_input.codecs import codec_for
from tf_serving_input.features import PreprocessConfig
from tf_serving_input.layout import OutputLayout, shard_stem


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One stored image: what the pages show, and where its record is."""

    key: str
    source: str
    split: str
    label: str
    shard: str  # the shard's stem, e.g. 'train-00003-of-00016'
    offset: int
    stored_bytes: int


class RecordIndex:
    """Every stored image of a job output, by key, in shard and record order."""

    def __init__(self, layout: OutputLayout, manifest: dict) -> None:
        self.layout = layout
        self.config = PreprocessConfig.from_dict(manifest["config"]["preprocess"])
        self._codec = codec_for(self.config)
        self._files = {shard_stem(shard["file"]): layout.path(shard["file"]) for shard in manifest["shards"]}
        self.entries: dict[str, Entry] = {}
        for stem, path in self._files.items():
            self._index_shard(stem, path)

    def _index_shard(self, stem: str, path: str) -> None:
        split = stem.rsplit("-", 3)[0]
        with open(path, "rb") as f:
            for offset, record in read_records_at(f, verify=False):  # Checked again when a record is read.
                feature = parse_example(record).features.feature
                key = feature[features.IMAGE_KEY].bytes_list.value[0].decode("ascii")
                self.entries[key] = Entry(
                    key=key, source=_text(feature, features.IMAGE_SOURCE), split=split,
                    label=_text(feature, features.LABEL_TEXT), shard=stem, offset=offset,
                    stored_bytes=len(feature[self._codec.feature_key].bytes_list.value[0]))

    def __contains__(self, key: object) -> bool:
        return key in self.entries

    def get(self, key: str) -> Entry | None:
        """The entry of `key`, or None."""
        return self.entries.get(key)

    def record(self, key: str) -> bytes:
        """The serialized record of a stored key (KeyError when unknown), its CRCs checked."""
        entry = self.entries[key]
        with open(self._files[entry.shard], "rb") as f:
            f.seek(entry.offset)
            return next(read_records_at(f, verify=True, offset=entry.offset))[1]

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one index per process, alive as long as the app.
    def thumbnail(self, key: str, size: int = 128) -> bytes:
        """PNG bytes of a stored image, decoded through its storage codec, at most `size` px a side."""
        from PIL import Image

        from tf_serving_input.codecs import parse_record

        image, _ = parse_record(self.record(key), self.config)
        picture = Image.fromarray(image.numpy())
        if max(picture.size) > size:
            picture = picture.resize((size, size), Image.Resampling.BILINEAR)
        out = io.BytesIO()
        picture.save(out, format="PNG")
        return out.getvalue()


def _text(feature, name: str) -> str:
    values = feature[name].bytes_list.value if name in feature else []
    return values[0].decode("utf-8", "replace") if values else ""
