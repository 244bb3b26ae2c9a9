"""Beam's views of the pipeline options (`options.view_as(TypeOptions)`), made once per options object.

Beam builds a view anew on every `view_as` call: a new argparse parser with that class's flags, which then
parses the whole command line again (~1 ms). While a pipeline is built it asks for one on every transform
applied and on every type check (`typehints.is_consistent_with` reads `TypeOptions` from the pipeline's
options each time): 882 views in a one-image preprocessing run, ~1 s of CPU on this project's machine
(measured: 882 `view_as(TypeOptions)` calls, 0.97 s of CPU), a quarter of a warm run.

A view holds nothing of its own: its values are the options object's `_all_options`, shared by every view
(Beam's own design: "modifications of values in any view-object will apply to current object and other
view-objects"). So `install()` makes `view_as` hand back the view it made before for the same options object
and class, as long as that object still has the same flags and the same `_all_options`; anything else is
made as Beam makes it. Installed by `launcher.beam_options`, before a job builds its pipeline.
"""

from __future__ import annotations

import weakref
from typing import Any

# options object -> {view class: the view made for it}. Weak: an options object is not kept alive by its views.
_VIEWS: weakref.WeakKeyDictionary[Any, dict[type, Any]] = weakref.WeakKeyDictionary()
_beams_own: Any = None


def view_as(options: Any, cls: type) -> Any:
    """`options.view_as(cls)`: the view made earlier for these options and this class, else Beam's new one."""
    views = _VIEWS.get(options)
    if views is None:
        views = _VIEWS.setdefault(options, {})
    view = views.get(cls)
    # Beam's view shares the options' flags and values: one made before either changed is made again.
    if view is None or view._flags is not options._flags or view._all_options is not options._all_options:
        view = views[cls] = _beams_own(options, cls)
    return view


def install() -> None:
    """Puts `view_as` in the place of Beam's `PipelineOptions.view_as` (once a process)."""
    global _beams_own
    from apache_beam.options.pipeline_options import PipelineOptions

    if _beams_own is None:
        _beams_own = PipelineOptions.view_as
        PipelineOptions.view_as = view_as  # type: ignore[method-assign,assignment]
