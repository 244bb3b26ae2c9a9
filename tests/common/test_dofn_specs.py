"""Beam's DoFn state and timer search, kept per method (common/dofn_specs.py), answers as Beam's own does."""

import types

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain

from beam_pipeline.common import dofn_specs, launcher

COUNT = userstate.ReadModifyWriteStateSpec("count", VarIntCoder())
SEEN = userstate.BagStateSpec("seen", VarIntCoder())
FLUSH = userstate.TimerSpec("flush", TimeDomain.WATERMARK)


class Counting(beam.DoFn):
    def process(self, element, count=beam.DoFn.StateParam(COUNT), seen=beam.DoFn.StateParam(SEEN),
                flush=beam.DoFn.TimerParam(FLUSH)):
        key, value = element
        count.write((count.read() or 0) + 1)
        seen.add(value)
        flush.set(0)

    @userstate.on_timer(FLUSH)
    def flushed(self, key=beam.DoFn.KeyParam, count=beam.DoFn.StateParam(COUNT)):
        yield key, count.read()


class Plain(beam.DoFn):
    def process(self, element, timestamp=beam.DoFn.TimestampParam):
        yield element


class TwiceTheSameState(beam.DoFn):
    def process(self, element, a=beam.DoFn.StateParam(COUNT), b=beam.DoFn.StateParam(COUNT)):
        yield element


def _fine(element, timestamp=beam.DoFn.TimestampParam):
    yield element


def _dofns():
    replaced = Plain()
    replaced.process = types.MethodType(Counting.process, replaced)  # A method of the instance, not its class.
    return {"stateful": Counting(), "plain": Plain(), "flatmap": beam.FlatMap(_fine).dofn,
            "map": beam.Map(lambda x: x).dofn, "replaced on the instance": replaced}


@pytest.mark.parametrize("name", list(_dofns()))
def test_the_same_specs_as_beams_own_every_time(name):
    dofn = _dofns()[name]
    expected = dofn_specs.beams_own()(dofn)
    assert dofn_specs.get_dofn_specs(dofn) == expected
    assert dofn_specs.get_dofn_specs(dofn) == expected  # Again, from what the first call kept.


def test_a_method_naming_one_parameter_twice_is_refused_as_beam_refuses_it():
    dofn = TwiceTheSameState()
    with pytest.raises(ValueError) as beams:
        dofn_specs.beams_own()(dofn)
    for _ in range(2):  # The second time from what the first kept.
        with pytest.raises(ValueError) as ours:
            dofn_specs.get_dofn_specs(dofn)
        assert str(ours.value) == str(beams.value)


def test_a_job_installs_it_and_a_stateful_pipeline_runs_with_it():
    launcher.beam_options([])  # What every job calls before it builds its pipeline.
    assert userstate.get_dofn_specs is dofn_specs.get_dofn_specs
    with beam.Pipeline("FnApiRunner") as pipeline:
        counted = (pipeline | beam.Create([("a", 1), ("b", 2), ("a", 3)]) | beam.ParDo(Counting()))
        assert_that(counted, equal_to([("a", 2), ("b", 1)]))
