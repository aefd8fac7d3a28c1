"""The presentation layer: every number written as text, and the tables and pictures.

* :mod:`~exactattn.present.cells`: numbers as table cells and closed forms;
* :mod:`~exactattn.present.tables`, :mod:`~exactattn.present.score_tables`,
  :mod:`~exactattn.present.modifier_tables`, :mod:`~exactattn.present.backward_tables`:
  the pencil-check tables;
* :mod:`~exactattn.present.render` and :mod:`~exactattn.present.stream`: text,
  Markdown, CSV, LaTeX, JSON and JSON lines;
* :mod:`~exactattn.present.svg`: pictures; :mod:`~exactattn.present.sweep`: sweeps.
"""
