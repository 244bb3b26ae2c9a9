"""Beam's views of the pipeline options, kept per options object (common/option_views.py), act as Beam's own."""

import pickle

from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    TypeOptions,
    WorkerOptions,
)

from beam_pipeline.common import launcher, option_views


def test_a_job_installs_it():
    launcher.beam_options([])  # What every job calls before it builds its pipeline.
    assert PipelineOptions.view_as is option_views.view_as


def test_views_read_their_own_options_share_one_set_of_values_and_survive_pickling():
    option_views.install()
    one = PipelineOptions(["--runner", "FnApiRunner", "--direct_num_workers", "3", "--disable_beartype"])
    other = PipelineOptions(["--direct_num_workers", "1"])
    for _ in range(2):  # The second time from what the first made.
        assert one.view_as(DirectOptions).direct_num_workers == 3 and one.view_as(TypeOptions).disable_beartype
        assert other.view_as(DirectOptions).direct_num_workers == 1
        assert not other.view_as(TypeOptions).disable_beartype
    assert one.view_as(DirectOptions) is one.view_as(DirectOptions)
    # A value set through one view is every view's, and the options' own (Beam: views share the values).
    one.view_as(StandardOptions).streaming = True
    assert one.get_all_options()["streaming"] and option_views._beams_own(one, StandardOptions).streaming
    view = one.view_as(WorkerOptions)
    assert view.view_as(StandardOptions).runner == "FnApiRunner"  # A view of a view.
    again = pickle.loads(pickle.dumps(one))
    assert again.view_as(StandardOptions).streaming and again.view_as(DirectOptions).direct_num_workers == 3


def test_a_view_made_before_the_values_or_flags_changed_is_made_again():
    option_views.install()
    options = PipelineOptions(["--direct_num_workers", "2"])
    before = options.view_as(DirectOptions)
    options._all_options = dict(options._all_options, direct_num_workers=5)
    assert options.view_as(DirectOptions) is not before and options.view_as(DirectOptions).direct_num_workers == 5
    options._flags = ["--direct_num_workers", "7"]
    assert options.view_as(DirectOptions)._flags == ["--direct_num_workers", "7"]
