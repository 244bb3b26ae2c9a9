"""TFRecord framing written by the job reads with TensorFlow's own reader, and back."""

import tensorflow as tf

from beam_pipeline.records import frame_record, iter_records


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
