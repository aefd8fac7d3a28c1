"""The numbers layer: exact and certified values, and their rounding into float formats.

* :mod:`~exactattn.numbers.formats`: IEEE float formats, correct rounding of exact
  values into them, ULP distances and text forms.
"""
