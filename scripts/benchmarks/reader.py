"""reader_vs_after, reader_vs_same_work, train_reader_vs_no_augment, train_reader_vs_after.

The reader (make_dataset over the job's records, default raw storage) against baselines built with
plain tf.data (pipelines.py), images/s of normalized batches of 64 over --seconds each. Every
repetition measures, in this order: 'after', the reader in evaluation mode, the same-work plain
pipeline over the same records, the training reader without and with its default augmentation,
then the informational 'before' and image_dataset_from_directory. The ratios that see only the
records (same work, augmentation) are measured on one set: the records do not depend on it.
"""

from benchmarks.harness import in_turn, rate_step
from benchmarks.pipelines import classic_pipelines, same_work_pipeline

BATCH = 64
AFTER = "after (TF ops, parallel)"


def measure(bench, image_set, job, records_ratios):
    """The reader ratios on `image_set`'s job output (`job`: a job.JobSection)."""
    from tf_serving_input.codecs import codec_for
    from tf_serving_input.features import PreprocessConfig
    from tf_serving_input.reader import make_dataset, shard_files

    results, seconds = bench.results, bench.args.seconds
    statistics = job.manifest["statistics"]
    mean, std = statistics["pixel_mean"], statistics["pixel_std"]
    classic = classic_pipelines(job.csv, image_set.folder, mean, std, BATCH)
    subjects = {"reader, evaluation": make_dataset(job.out, "train", batch_size=BATCH, training=False, repeat=True)}
    if records_ratios:
        config = PreprocessConfig.from_dict(job.manifest["config"]["preprocess"])
        subjects["plain tf.data, same work"] = same_work_pipeline(
            shard_files(job.out, "train"), codec_for(config).feature_key, config.image_size,
            statistics["label_vocabulary"], mean, std, BATCH)
        subjects["reader, training, no augmentation"] = make_dataset(
            job.out, "train", batch_size=BATCH, training=True, repeat=True, augment=False, seed=1)
    subjects["reader, training (default augmentation)"] = make_dataset(
        job.out, "train", batch_size=BATCH, training=True, repeat=True, seed=1)
    order = {AFTER: classic[AFTER], **subjects,
             **{name: dataset for name, dataset in classic.items() if name != AFTER}}

    def log(repetition, sample):
        results.say(f"   [{image_set.name} {repetition + 1}/{bench.repetitions}] " +
                    ", ".join(f"{name} {rate:.0f}" for name, rate in sample.items()) + " img/s")

    rates = in_turn(bench.repetitions, {name: rate_step(dataset, seconds) for name, dataset in order.items()}, log)
    results.say(f"2. [{image_set.title}] the reader ({job.manifest['config']['preprocess']['image_format']} "
                f"storage) vs tf.data pipelines, batches of {BATCH}, {seconds:g} s per measurement:")

    def over(subject, baseline):
        return [s / b for s, b in zip(rates[subject], rates[baseline])]

    results.ratio("reader_vs_after", image_set.title, over("reader, evaluation", AFTER))
    if records_ratios:
        results.ratio("reader_vs_same_work", "224 px records", over("reader, evaluation", "plain tf.data, same work"))
        results.ratio("train_reader_vs_no_augment", "224 px records",
                      over("reader, training (default augmentation)", "reader, training, no augmentation"))
    results.ratio("train_reader_vs_after", image_set.title, over("reader, training (default augmentation)", AFTER))
    for name, samples in rates.items():
        results.rate(f"{name} ({image_set.name})", samples)
    return rates
