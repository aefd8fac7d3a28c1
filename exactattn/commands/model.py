"""``model``: a real head (or a whole attention layer) from a weights file, exactly.

``exactattn model walkthrough --weights model.safetensors --arch bert --layer 0
--head 3 --tokens x.npy`` prints the worked tables (the same modes as the
built-in examples: row, weights, project, square, scores, walkthrough) for
one head of a checkpoint; ``exactattn model layer ...`` prints every output
of the whole layer (all heads, W_O, b_O), certified.
"""

from __future__ import annotations

import json
import sys

from ..errors import InputError, shorten
from ..options import choice, places, whole
from ..render import FORMATS, Section, write
from ..stream import PAGE, View
from ..tables import MODES, attend_example, build

MODEL_MODES = MODES + ("walkthrough", "layer")
HELP = "a head or layer of a real model from its weights file, exactly"


def register(sub) -> None:
    p = sub.add_parser("model", help=HELP, description=HELP)
    p.add_argument("mode", type=choice("MODE", MODEL_MODES), metavar="MODE",
                   help=f"what to print: {', '.join(MODEL_MODES)}")
    p.add_argument("--weights", required=True, metavar="FILE",
                   help=".safetensors (pip install 'exactattn[models]'), .npz, .npy, "
                        ".pt/.pth/.bin (torch)")
    arch = p.add_mutually_exclusive_group(required=True)
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
    p.add_argument("--tokens", required=True, metavar="FILE",
                   help="the layer's input: n x d_model numbers (.npy, .npz or .json)")
    p.add_argument("--no-rotary", action="store_true",
                   help="evaluate llama projections without their rotary embeddings "
                        "(not the model's scores)")
    p.add_argument("--digits", type=places("--digits"), default=4, metavar="N",
                   help="decimal places of shares and outputs (certified; default 4)")
    p.add_argument("--format", type=choice("--format", FORMATS), default="text",
                   metavar="FORMAT", help=f"output format: {', '.join(FORMATS)} (default text)")
    p.set_defaults(func=run)


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


def run(args) -> int:
    from ..layer import attend_layer
    from ..models.example import load_model_head
    arch = args.arch if args.names is None else _name_map(args.names)
    loaded = load_model_head(args.weights, arch, args.layer, args.head, args.tokens,
                             heads=args.heads, kv_heads=args.kv_heads,
                             rotary="ignore" if args.no_rotary else "refuse")
    ex = loaded.example
    meta = {"example": ex.name, "mode": args.mode, "digits": args.digits,
            "weights": args.weights, "layer": args.layer, "head": args.head,
            "exactness": loaded.note}
    if args.mode == "layer":
        sections = [_layer_section(attend_layer(loaded.layer, ex.x), args.digits)]
    else:
        trace = attend_example(ex)
        view = View.of(args.format, len(ex.x))
        modes = MODES if args.mode == "walkthrough" else (args.mode,)
        sections = [s for m in modes for s in build(m, ex, trace, args.digits,
                                                    closed_forms=args.format == "json",
                                                    view=view)]
    sections[0].notes.append(loaded.note)
    write(sections, args.format, sys.stdout, meta, wrap=PAGE)
    return 0
