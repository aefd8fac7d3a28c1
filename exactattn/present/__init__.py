"""The presentation layer: every number written as text, and the tables and pictures.

* :mod:`~exactattn.present.cells`: numbers as table cells and closed forms;
* :mod:`~exactattn.present.tables`: the pencil-check tables as data, one list
  (:data:`~exactattn.present.tables.TABLES`: mode, when shown, builder) read by one
  builder (:func:`~exactattn.present.tables.build`); the builders of the scores and of a
  modified head's stages are in :mod:`~exactattn.present.score_tables` and
  :mod:`~exactattn.present.modifier_tables`, the backward's in
  :mod:`~exactattn.present.backward_tables`;
* :mod:`~exactattn.present.render` and :mod:`~exactattn.present.stream`: text,
  Markdown, CSV, LaTeX, HTML, JSON and JSON lines (one ``Printer`` walk for the line
  formats);
* :mod:`~exactattn.present.svg`: pictures; :mod:`~exactattn.present.sweep`: sweeps.
"""
