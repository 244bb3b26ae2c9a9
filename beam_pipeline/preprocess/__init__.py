"""The preprocessing job: CSV of images -> sharded TFRecords + tensorflow-transform statistics; `inspect`."""
