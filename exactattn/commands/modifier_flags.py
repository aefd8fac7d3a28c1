"""The policy flags every command shares: the modifiers (sinks, ALiBi, soft-capping, windows,
offsets, dropout, RoPE, LSE) and the policy group (scale, causal, alignment, empty rows, ...).

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
* ``--rope THETA[:half|interleaved]``: rotary position embeddings; ``--rope-scaling JSON``
  their scaling as transformers writes it (``{"rope_type": "llama3", "factor": 8, ...}``).
* ``--lse [e|2]``: each row's log-sum-exp (natural log unless ``2``).

The policy group (:func:`add_policy_flags`, read with the modifiers by :func:`apply`):
``--like`` (a library's preset), ``--scale``, ``--causal``, ``--alignment``,
``--window``, ``--empty-row``, ``--mask-kind`` and ``--gqa``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from ..call.policy import (ALIGNMENTS, EMPTY_ROWS, GQA_MAPS, MASK_KINDS, MODIFIER_FIELDS, PRESETS,
                           Policy, parse_scale)
from ..errors import InputError, shorten
from ..numbers.lse import LSE_BASES
from ..call.modifiers import (ALIBI_FORMS, ROPE_LAYOUTS, Alibi, Rope, check_dropout, check_form,
                         check_layout, check_rope_dims, check_scaling, check_softcap,
                         check_theta, exact_number)
from ..options import argtype, choice, whole

#: the flag of each Policy modifier field (every one of call.MODIFIER_FIELDS)
FLAGS = {field: "--" + field.replace("_", "-") for field in MODIFIER_FIELDS}
#: the policy group's single fields (``--like`` sets several of them first)
POLICY_FIELDS = ("scale", "causal", "alignment", "empty_row", "mask_kind", "gqa")


def _typed(flag: str, parse):
    """An argparse type: ``parse`` of the stripped text, whose one-line error (naming ``flag``)
    comes through as it is."""
    return argtype(parse, flag, str, echo=False)


def _alibi(text: str) -> Alibi:
    heads, _, form = text.partition(":")
    if not heads.strip().isdigit():
        raise InputError(f"--alibi must be HEADS or HEADS:FORM with FORM one of "
                         f"{', '.join(ALIBI_FORMS)} (got {shorten(text, quote=True)})")
    return Alibi(int(heads), check_form(form or "relative", "--alibi FORM"))


def _finite(name: str):
    raise InputError(f"--rope-scaling numbers must be finite (got {name}); NaN and infinities "
                     "have no exact value: write a finite number")


def _scaling(text: str):
    try:       # decimals read from their text, Infinity and NaN refused
        table = json.loads(text, parse_float=str, parse_constant=_finite)
    except json.JSONDecodeError:
        raise InputError(f"--rope-scaling must be a JSON table such as '{{\"rope_type\": "
                         f"\"linear\", \"factor\": 2}}' (got {shorten(text, quote=True)})") from None
    return check_scaling(table, "--rope-scaling")


def _rope(text: str) -> Rope:
    theta, _, rest = text.partition(":")
    layout, _, dims = rest.partition(":")
    if dims and not dims.strip().isdigit():
        raise InputError(f"--rope DIMS must be an even whole number (got {shorten(dims, quote=True)}); "
                         "e.g. --rope 10000:half:32 turns the first 32 entries of each head")
    return Rope(check_theta(theta, "--rope THETA"), check_layout(layout or "half", "--rope LAYOUT"),
                check_rope_dims(int(dims), "--rope DIMS") if dims else None)


def _window(text: str) -> tuple:
    parts = [t.strip().lower() for t in text.split(",")]
    if len(parts) != 2 or not all(t == "none" or (t.isdigit() and len(t) <= 12) for t in parts):
        raise InputError(f"--window must be LEFT,RIGHT, whole numbers >= 0 or none (got "
                         f"{shorten(text, quote=True)}); e.g. 2,0")
    return tuple(None if t == "none" else int(t) for t in parts)


#: every policy flag's declaration, by field (``like``: a library's preset); a command's own
#: wording of a help is passed to :func:`add_policy_flags` or :func:`add_flags`
DECLARED = {
    "like": dict(type=choice("--like", tuple(PRESETS)),
                 help=f"set alignment, empty rows, mask kind and GQA as a library does: "
                      f"{', '.join(PRESETS)}"),
    # a scale (default, 1/8, 1/sqrt(48), none) checked by parse_scale and kept as text
    "scale": dict(type=argtype(lambda t: (parse_scale(t, name="--scale"), t)[1], "--scale",
                               echo=False), help="default (1/sqrt(d_k)), a number, '1/sqrt(q)' or none"),
    "causal": dict(action=argparse.BooleanOptionalAction, default=None,
                   help="hide keys after the query"),
    "alignment": dict(type=choice("--alignment", ALIGNMENTS),
                      help=f"causal alignment when L != S: {', '.join(ALIGNMENTS)}"),
    "empty_row": dict(type=choice("--empty-row", EMPTY_ROWS),
                      help=f"what a query that sees no key gets: {', '.join(EMPTY_ROWS)}"),
    "mask_kind": dict(type=choice("--mask-kind", MASK_KINDS),
                      help=f"how the spec's mask is read: {', '.join(MASK_KINDS)}"),
    "gqa": dict(type=choice("--gqa", GQA_MAPS),
                help=f"which key/value head a query head reads: {', '.join(GQA_MAPS)}"),
    "sink": dict(type=_typed("--sink", lambda t: exact_number(t, "--sink")), metavar="S",
                 help="an attention-sink logit joining every row's normaliser, counted once "
                      "(0: softmax plus one)"),
    "alibi": dict(type=_typed("--alibi", _alibi), metavar="HEADS[:FORM]",
                  help="ALiBi slopes of a model with HEADS heads (Press et al. 2022; not only "
                       f"powers of two); FORM: {', '.join(ALIBI_FORMS)} (relative)"),
    "head": dict(type=whole("--head", low=0), metavar="H",
                 help="which head of the model this call is, from 0 (its ALiBi slope)"),
    "softcap": dict(type=_typed("--softcap", lambda t: check_softcap(t, "--softcap")),
                    metavar="CAP", help="cap * tanh(score / cap) on the scaled scores, before "
                                        "the mask (Gemma 2); certified, not exact"),
    "window": dict(type=_typed("--window", _window), metavar="LEFT,RIGHT",
                   help="sliding window: query at position p sees keys p-LEFT .. p+RIGHT, its "
                        "own key counted (none: no limit); a causal window of w keys is "
                        "w-1,0 on a causal head"),
    "query_offset": dict(type=whole("--query-offset", low=0), metavar="P",
                         help="the position of query 0 (a decode step over cached keys 0..P)"),
    "dropout": dict(type=_typed("--dropout", lambda t: check_dropout(t, "--dropout")),
                    metavar="P", help="dropout p with the spec file's policy.dropout.keep mask: "
                                      "kept weights times 1/(1-p); rows no longer sum to 1"),
    "rope": dict(type=_typed("--rope", _rope), metavar="THETA[:LAYOUT[:DIMS]]",
                 help=f"rotary position embeddings, base THETA; LAYOUT: "
                      f"{', '.join(ROPE_LAYOUTS)} (half); DIMS: turn only the first DIMS "
                      "entries of each head (partial rotary; default all); certified, not exact"),
    "rope_scaling": dict(type=_typed("--rope-scaling", _scaling), metavar="JSON",
                         help="the rope's scaling as transformers writes it, e.g. "
                              "'{\"rope_type\": \"llama3\", \"factor\": 8, ...}' (linear, "
                              "dynamic, llama3, yarn; or {\"inv_freq\": [...]})"),
    "lse": dict(nargs="?", const="e", type=choice("--lse", LSE_BASES), default=None,
                metavar="BASE", help="each row's log-sum-exp, in natural-log units (--lse 2: "
                                     "base 2)"),
}


def _declare(group, fields, helps: dict) -> None:
    for field in fields:
        kwargs = dict(DECLARED[field])
        kwargs["help"] = helps.get(field) or kwargs["help"]
        group.add_argument("--" + field.replace("_", "-"), **kwargs)


def add_flags(p, *, lse: bool = True, dropout: bool = True, lse_help: str | None = None) -> None:
    """Add the modifier flags to the parser ``p`` (a group of their own)."""
    g = p.add_argument_group("modifiers (fields of the policy; override the spec file's)")
    _declare(g, ("sink", "alibi", "head", "softcap", "window", "query_offset") +
             ("dropout",) * dropout + ("rope", "rope_scaling") + ("lse",) * lse,
             {"lse": lse_help})


def add_policy_flags(p, title: str, fields: tuple[str, ...], **helps: str) -> None:
    """Add the policy group's flags of ``fields`` to ``p``, in that order, under ``title``
    (``helps``: a command's own wording, by field)."""
    _declare(p.add_argument_group(title), fields, helps)


def apply(policy, args):
    """``policy`` (the default :class:`~exactattn.call.policy.Policy` for None) with the flags
    given: ``--like``'s preset first, then the policy group's single flags and the modifiers,
    field by field, checked as a whole (the one reading of these flags for every command).

    Raises:
        InputError: ``--head`` without ALiBi (or past its heads), ``--query-offset``
            with nothing that reads positions.
    """
    policy = policy or Policy()
    if getattr(args, "like", None):
        policy = policy.replace(**PRESETS[args.like])
    given = {field: getattr(args, field) for field in (*FLAGS, *POLICY_FIELDS)
             if getattr(args, field, None) is not None}
    scaling = getattr(args, "rope_scaling", None)
    if not given and scaling is None:
        return policy
    out = policy.replace(**given)
    if scaling is not None:
        if out.rope is None:
            raise InputError("--rope-scaling must come with --rope THETA or a spec's rope (got "
                             "--rope-scaling alone); it scales the rotary frequencies")
        out = out.replace(rope=replace(out.rope, scaling=scaling))
    if "head" in given and out.alibi is None:
        raise InputError(f"--head must come with --alibi (got --head {given['head']} alone); "
                         "the head's index sets its ALiBi slope")
    if "query_offset" in given and not (out.causal or out.window is not None or
                                        out.alibi is not None or out.rope is not None):
        raise InputError(f"--query-offset must come with a causal head, --window, --alibi or "
                         f"--rope (got --query-offset {given['query_offset']} alone); "
                         "nothing else reads positions")
    return out


def apply_modifiers(example, args):
    """The example (a spec's or a built-in one) with the flags applied to its head's policy
    (itself without any)."""
    changed = apply(example.head.policy, args)
    return example if changed is example.head.policy else \
        replace(example, head=example.head.with_policy(changed))


def example_meta(ex, mode: str, digits: int, **more) -> dict:
    """The JSON head of a worked example's tables: its name, the mode, the places, the layout,
    ``more``, and the policy's modifiers when it has any."""
    modifiers = ex.head.policy.modifiers()
    return {"example": ex.name, "mode": mode, "digits": digits, "layout": ex.head.layout,
            **more, **({"policy": modifiers} if modifiers else {})}


def refuse(args, problem, searching: bool) -> None:
    """Refuse modifier flags that cannot apply: dropout without a keep-mask, modifiers with
    ``--search`` (which checks the plain call); the gradients take every modifier
    (``UNSUPPORTED`` has no "gradients" row)."""
    given = [flag for field, flag in FLAGS.items() if getattr(args, field, None) is not None]
    if getattr(args, "lse", None) is not None:
        given.append("--lse")
    if searching and given:
        raise InputError(f"{given[0]} must come without --search (got both); --search checks "
                         "the call without modifiers")
    if args.dropout is not None and (problem is None or problem.dropout_keep is None):
        raise InputError("--dropout must come with a spec file that has a dropout keep-mask "
                         "(got none); add \"policy\": {\"dropout\": {\"p\": \"1/10\", \"keep\": "
                         "[[true, false, ...], ...]}} (L x S, true = kept)")

