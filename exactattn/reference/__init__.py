"""The reference layer: the exact answer of a :class:`~exactattn.call.Call`.

* :mod:`~exactattn.reference.logits`: the one modifier order (RoPE, scale, soft-cap,
  ALiBi and offsets, hiding, softmax with a sink, dropout) for one exact row;
* :mod:`~exactattn.reference.kernels`: the counted projection and score loops (the exact
  layer's projections; a head's score and mix MACs are :meth:`Reference.counts`);
* :mod:`~exactattn.reference.online`: online-softmax rows and split-merge states;
* :mod:`~exactattn.reference.reference`: :class:`Reference`, shares, outputs,
  log-sum-exps and gradients of a call;
* :mod:`~exactattn.reference.enclose`: whole-head ``arb`` enclosures, rounded to a dtype.
"""
