"""end_to_end_1_epoch and end_to_end_10_epochs: what a user waits for, job included.

The subject is the project's path: the job's wall time on N rows (the N-row run of the same
repetition in the job section, start-up included) plus E epochs of the reader in evaluation mode;
the baseline is E epochs of the tf.data guide's 'after' straight from the JPEGs, which does the
decode and resize the job did, every epoch. Each side is timed from building its dataset to the
end of epoch E; one run of 10 epochs gives both E = 1 and E = 10. Ratio: baseline seconds /
subject seconds (above 1: the job has paid for itself).
"""

from benchmarks.harness import epoch_times, in_turn
from benchmarks.pipelines import after_pipeline

EPOCHS = (1, 10)


def measure(bench, image_set, job):
    from tf_serving_input.reader import make_dataset

    statistics = job.manifest["statistics"]
    mean, std = statistics["pixel_mean"], statistics["pixel_std"]
    last = max(EPOCHS)

    def job_seconds(repetition):
        return job.small_walls[repetition % len(job.small_walls)]

    def log(repetition, sample):
        after, reader = sample["after"], sample["reader"]
        bench.results.say(f"   [{image_set.name} {repetition + 1}/{bench.repetitions}] job "
                          f"{job_seconds(repetition):.1f} s; reader {reader[0]:.1f} s for 1 epoch, "
                          f"{reader[-1]:.1f} s for {last}; 'after' {after[0]:.1f} s, {after[-1]:.1f} s")

    times = in_turn(bench.repetitions, {
        "after": lambda _: epoch_times(lambda: after_pipeline(job.csv, mean, std, 64), last),
        "reader": lambda _: epoch_times(lambda: make_dataset(job.out, "train", batch_size=64, training=False), last)},
        log)
    samples = {epochs: [after[epochs - 1] / (job_seconds(repetition) + reader[epochs - 1])
                        for repetition, (after, reader) in enumerate(zip(times["after"], times["reader"]))]
               for epochs in EPOCHS}
    bench.results.say(f"3. [{image_set.title}] end to end, {job.rows} images: 'after' for E epochs vs the job + E "
                      "epochs of the reader:")
    bench.results.ratio("end_to_end_1_epoch", image_set.title, samples[1])
    bench.results.ratio("end_to_end_10_epochs", image_set.title, samples[10])
