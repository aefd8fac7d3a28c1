"""The modifier flags every command shares: sinks, ALiBi, soft-capping, windows, offsets, dropout, RoPE, LSE.

One parser for ``verify``, the table commands and ``blocks``.  Each flag
sets one field of :class:`~exactattn.call.policy.Policy` (over the spec file's
policy) and is read exactly: a number is text (``--sink 0``,
``--softcap 1/2``), never a binary float.

* ``--sink S``: an attention-sink logit (0 = "softmax plus one").
* ``--alibi HEADS[:relative|absolute|symmetric]``: ALiBi slopes of a model
  with HEADS heads; ``--head H`` says which head (from 0) this call is.
* ``--softcap CAP``: ``cap * tanh(score / cap)`` on the scaled scores.
* ``--window LEFT,RIGHT``: keys ``p - LEFT .. p + RIGHT`` (the query's own
  key counted; ``none`` for no limit on a side).
* ``--query-offset P``: query 0 sits at position P (a decode step).
* ``--dropout P``: kept weights times 1/(1 - P); the keep-mask is the spec
  file's ``policy.dropout.keep``.
* ``--rope THETA[:half|interleaved]``: rotary position embeddings.
* ``--lse [e|2]``: each row's log-sum-exp (natural log unless ``2``).
"""

from __future__ import annotations

import argparse

from ..call.policy import MODIFIER_FIELDS, parse_scale
from ..errors import InputError, shorten
from ..numbers.lse import LSE_BASES
from ..call.modifiers import (ALIBI_FORMS, ROPE_LAYOUTS, Alibi, Rope, check_dropout, check_form,
                         check_layout, check_softcap, check_theta, exact_number)
from ..options import choice, whole

__all__ = ["FLAGS", "add_flags", "apply", "changes", "lse", "refuse", "scale_type", "window_type"]

#: the flag of each Policy modifier field (every one of call.MODIFIER_FIELDS)
FLAGS = {field: "--" + field.replace("_", "-") for field in MODIFIER_FIELDS}


def _typed(flag: str, parse):
    """An argparse type: ``parse(text)``, whose one-line error (naming ``flag``) comes through."""
    def convert(text: str):
        try:
            return parse(text.strip())
        except InputError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = flag
    return convert


def _alibi(text: str) -> Alibi:
    heads, _, form = text.partition(":")
    if not heads.strip().isdigit():
        raise InputError(f"--alibi must be HEADS or HEADS:FORM with FORM one of "
                         f"{', '.join(ALIBI_FORMS)} (got {shorten(text, quote=True)})")
    return Alibi(int(heads), check_form(form or "relative", "--alibi FORM"))


def _rope(text: str) -> Rope:
    theta, _, layout = text.partition(":")
    return Rope(check_theta(theta, "--rope THETA"), check_layout(layout or "half", "--rope LAYOUT"))


def _window(text: str) -> tuple:
    parts = [t.strip().lower() for t in text.split(",")]
    if len(parts) != 2 or not all(t == "none" or (t.isdigit() and len(t) <= 12) for t in parts):
        raise InputError(f"--window must be LEFT,RIGHT, whole numbers >= 0 or none (got "
                         f"{shorten(text, quote=True)}); e.g. 2,0")
    return tuple(None if t == "none" else int(t) for t in parts)


def window_type(flag: str = "--window"):
    """An argparse type for ``LEFT,RIGHT`` sliding-window widths (``none``: no limit)."""
    return _typed(flag, _window)


def scale_type(flag: str = "--scale"):
    """An argparse type for a scale (``default``, ``1/8``, ``1/sqrt(48)``, ``none``), checked by
    :func:`~exactattn.call.policy.parse_scale` and kept as text."""
    def convert(text: str) -> str:
        try:
            parse_scale(text, name=flag)
        except InputError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return text
    convert.__name__ = flag
    return convert


def add_flags(p, *, lse: bool = True, dropout: bool = True, lse_help: str | None = None) -> None:
    """Add the modifier flags to the parser ``p`` (a group of their own)."""
    g = p.add_argument_group("modifiers (fields of the policy; override the spec file's)")
    g.add_argument("--sink", type=_typed("--sink", lambda t: exact_number(t, "--sink")),
                   metavar="S",
                   help="an attention-sink logit joining every row's normaliser, counted once "
                        "(0: softmax plus one)")
    g.add_argument("--alibi", type=_typed("--alibi", _alibi), metavar="HEADS[:FORM]",
                   help="ALiBi slopes of a model with HEADS heads (Press et al. 2022; not only "
                        f"powers of two); FORM: {', '.join(ALIBI_FORMS)} (relative)")
    g.add_argument("--head", type=whole("--head", low=0), metavar="H",
                   help="which head of the model this call is, from 0 (its ALiBi slope)")
    g.add_argument("--softcap", type=_typed("--softcap", lambda t: check_softcap(t, "--softcap")),
                   metavar="CAP", help="cap * tanh(score / cap) on the scaled scores, before "
                                       "the mask (Gemma 2); certified, not exact")
    g.add_argument("--window", type=window_type(), metavar="LEFT,RIGHT",
                   help="sliding window: query at position p sees keys p-LEFT .. p+RIGHT, its "
                        "own key counted (none: no limit); a causal window of w keys is "
                        "w-1,0 on a causal head")
    g.add_argument("--query-offset", type=whole("--query-offset", low=0), metavar="P",
                   help="the position of query 0 (a decode step over cached keys 0..P)")
    if dropout:
        g.add_argument("--dropout", metavar="P",
                       type=_typed("--dropout", lambda t: check_dropout(t, "--dropout")),
                       help="dropout p with the spec file's policy.dropout.keep mask: kept "
                            "weights times 1/(1-p); rows no longer sum to 1")
    g.add_argument("--rope", type=_typed("--rope", _rope), metavar="THETA[:LAYOUT]",
                   help=f"rotary position embeddings, base THETA; LAYOUT: "
                        f"{', '.join(ROPE_LAYOUTS)} (half); certified, not exact")
    if lse:
        g.add_argument("--lse", nargs="?", const="e", type=choice("--lse", LSE_BASES),
                       default=None, metavar="BASE",
                       help=lse_help or "each row's log-sum-exp, in natural-log units (--lse 2: "
                                        "base 2)")


def apply(policy, args):
    """``policy`` with the modifier flags given applied, checked as a whole.

    Raises:
        InputError: ``--head`` without ALiBi (or past its heads), ``--query-offset``
            with nothing that reads positions.
    """
    given = changes(args)
    if not given:
        return policy
    out = policy.replace(**given)
    if "head" in given and out.alibi is None:
        raise InputError(f"--head must come with --alibi (got --head {given['head']} alone); "
                         "the head's index sets its ALiBi slope")
    if "query_offset" in given and not (out.causal or out.window is not None or
                                        out.alibi is not None or out.rope is not None):
        raise InputError(f"--query-offset must come with a causal head, --window, --alibi or "
                         f"--rope (got --query-offset {given['query_offset']} alone); "
                         "nothing else reads positions")
    return out


def changes(args) -> dict:
    """The Policy fields the modifier flags set (only those given)."""
    out = {}
    for field, flag in FLAGS.items():
        value = getattr(args, field, None)
        if value is not None:
            out[field] = value
    return out


def refuse(args, problem, searching: bool) -> None:
    """Refuse modifier flags that cannot apply: dropout without a keep-mask, modifiers with
    ``--search`` (which checks the plain call), and with ``--backward`` the ones exact
    gradients do not take (soft-capped and rotary scores, a log-sum-exp)."""
    given = [flag for field, flag in FLAGS.items() if getattr(args, field, None) is not None]
    if getattr(args, "lse", None) is not None:
        given.append("--lse")
    if searching and given:
        raise InputError(f"{given[0]} must come without --search (got both); --search checks "
                         "the call without modifiers")
    if getattr(args, "backward", False):
        from ..call.policy import UNSUPPORTED
        bad = [FLAGS[f] for f in UNSUPPORTED["gradients"] if getattr(args, f, None) is not None]
        bad += ["--lse"] if "--lse" in given else []
        if bad:
            raise InputError(f"{bad[0]} must come without --backward (got both); the exact "
                             "gradients take sinks, ALiBi, windows and dropout, not soft-capped "
                             "or rotary scores or a log-sum-exp")
    if args.dropout is not None and (problem is None or problem.dropout_keep is None):
        raise InputError("--dropout must come with a spec file that has a dropout keep-mask "
                         "(got none); add \"policy\": {\"dropout\": {\"p\": \"1/10\", \"keep\": "
                         "[[true, false, ...], ...]}} (L x S, true = kept)")


def lse(args) -> str | None:
    """The log-sum-exp base asked for: ``--lse``, else the spec file's ``policy.lse``."""
    mine = getattr(args, "lse", None)
    return mine if mine is not None else getattr(args, "spec_lse", None)
