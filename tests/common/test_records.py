"""TFRecord framing written by the job reads with TensorFlow's own reader, and back."""

import io

import pytest
import tensorflow as tf

from beam_pipeline.common.records import DamagedRecords, frame_record, iter_records, read_records


def test_framing_reads_with_tfrecorddataset(tmp_path):
    records = [b"", b"a", b"\x00" * 1000, bytes(range(256)) * 40]
    path = tmp_path / "x.tfrecord"
    path.write_bytes(b"".join(frame_record(r) for r in records))
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(path))] == records
    assert list(iter_records(path.read_bytes())) == records


def test_a_corrupted_record_fails_tensorflow_crc_check(tmp_path):
    data = bytearray(frame_record(b"hello world"))
    data[14] ^= 0xFF  # A byte of the payload.
    (tmp_path / "bad.tfrecord").write_bytes(bytes(data))
    try:
        list(tf.data.TFRecordDataset(str(tmp_path / "bad.tfrecord")))
    except tf.errors.DataLossError:
        return
    raise AssertionError("TensorFlow read a record whose CRC does not match")


@pytest.mark.parametrize("flip", [3, 9, 14, 20])  # The length, its CRC, the payload, the payload's CRC.
def test_read_records_catches_one_flipped_byte_anywhere(flip):
    data = bytearray(frame_record(b"hello world"))
    data[flip] ^= 0x01
    with pytest.raises(DamagedRecords, match="corrupt") as caught:
        list(read_records(io.BytesIO(bytes(data))))
    assert not caught.value.truncated


def test_read_records_names_a_cut_file_truncated():
    data = frame_record(b"first") + frame_record(b"second")
    assert list(read_records(io.BytesIO(data))) == [b"first", b"second"]
    for cut in (len(data) - 3, len(frame_record(b"first")) + 5):
        with pytest.raises(DamagedRecords, match="truncated") as caught:
            list(read_records(io.BytesIO(data[:cut])))
        assert caught.value.truncated


def test_read_records_at_gives_offsets_a_seek_reads_back():
    import io

    from beam_pipeline.common.records import frame_record, read_records_at

    records = [b"a", b"", b"x" * 300, b"last"]
    data = b"".join(frame_record(record) for record in records)
    found = list(read_records_at(io.BytesIO(data)))
    assert [record for _, record in found] == records
    assert [offset for offset, _ in found] == [0, 17, 33, 349]  # 12 header bytes + data + 4 CRC bytes each.
    stream = io.BytesIO(data)
    for offset, record in found:
        stream.seek(offset)
        assert next(read_records_at(stream, offset=offset)) == (offset, record)
