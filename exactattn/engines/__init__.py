"""The engines layer: heads built from weights, run by the pencil, fast and symbolic engines.

* :mod:`~exactattn.engines.head`: :class:`Head` and :func:`attend` (the pencil, fast and
  symbolic engines);
* :mod:`~exactattn.engines.trace`: :class:`Trace`, what every engine returns;
* :mod:`~exactattn.engines.layer`: a layer of heads with its output projection;
* :mod:`~exactattn.engines.spec`: head spec files (JSON or TOML) read into an
  :class:`~exactattn.engines.spec.Example`, its head, tokens and their numbers.

Row blocks on Dask are :mod:`exactattn.blocks`.
"""
