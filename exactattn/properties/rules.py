"""Which property holds under which modifier: the one table.

:func:`~exactattn.properties.check_all` runs a property only when it holds
under the input's policy, and docs/modifiers.md prints this table (a test
checks the two agree).  A property *holds* under a set of modifiers when none
of them is in its ``breaks`` and all of its ``requires`` are on.

Why each one breaks:

* soft-capping (``cap * tanh(s / cap)``) is not linear, so adding a constant
  to a row of scores (or a bias to the keys, which adds ``q . b`` to a row)
  changes the shares: no shift invariance, no key-bias cancelling;
* a sink joins the normaliser and is not shifted with the scores; the keys'
  shares sum to ``1 - sink share`` < 1, so a value bias moves the outputs by
  less than itself and an output may leave the range of the values;
* ALiBi and RoPE read positions: permuting keys or queries, or two identical
  queries at different positions, change the answer;
* RoPE rotates the key and query, so a key bias does not cancel and a shift
  (a widened head) is no longer a constant per row;
* dropout scales kept weights by 1/(1 - p): rows sum to ``kept / (1 - p)``,
  not 1 (its dropped keys count as hidden for share support; permutations
  carry the keep-mask along);
* the causal rule and windows hide keys by position: the permutation checks
  do not apply.

>>> sorted(active(Policy(softcap="30", causal=True)))
['causal', 'softcap']
>>> holds("shift invariance", {"softcap"}), holds("shift invariance", {"alibi", "window"})
(False, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..options import check_choice
from ..call.policy import Policy

#: the modifiers the table knows, in the docs' column order: ``causal`` and every Policy
#: modifier field (``call.MODIFIER_FIELDS``) a property can depend on; ``query_offset`` only
#: moves positions and ``head`` only picks the ALiBi slope, so neither breaks one
MODIFIERS = ("causal", "window", "softcap", "sink", "alibi", "rope", "dropout")


@dataclass(frozen=True)
class Rule:
    """A property: what it says, the modifiers it needs and those it does not survive."""

    statement: str
    breaks: tuple = ()
    requires: tuple = ()


#: property name (as check_all reports it) -> its rule; ``OPT_IN`` ones are not run by check_all
PROPERTIES = {
    "matches reference": Rule("the outputs equal the exact attention"),
    "rows sum to one": Rule("every row of shares sums to exactly 1", ("sink", "dropout")),
    "rows sum below one": Rule("with a sink, every row of shares sums to exactly 1 minus "
                                "the sink's share, less than 1", ("dropout",), ("sink",)),
    "share support": Rule("shares are positive on visible keys and exactly 0 on masked ones"),
    "shift invariance": Rule("adding a constant to a row of scores changes nothing",
                              ("softcap", "sink", "rope")),
    "key permutation": Rule("permuting keys and values together leaves the outputs unchanged",
                             ("causal", "window", "alibi", "rope")),
    "query permutation": Rule("permuting the queries permutes the outputs",
                               ("causal", "window", "alibi", "rope")),
    "identical queries": Rule("identical queries get identical rows", ("alibi", "rope")),
    "key bias cancels": Rule("a bias on the keys cancels out of the shares",
                              ("softcap", "sink", "rope")),
    "value bias shifts": Rule("a bias on the values shifts every output by that bias",
                               ("sink", "dropout")),
    "outputs within values": Rule("each output lies between the smallest and largest "
                                   "visible value", ("sink", "dropout")),
    "masked entries ignored": Rule("keys and values at masked positions do not reach the "
                                    "outputs"),
    "causal first output": Rule("with a causal mask the first output is its own value",
                                 ("sink", "dropout"), ("causal",)),
    "masked inf/nan ignored": Rule("inf or NaN values at keys no query sees do not reach the "
                                    "outputs"),
}

#: properties check_all does not run (PyTorch's SDPA fails this one: 0 * inf = NaN)
OPT_IN = ("masked inf/nan ignored",)


def active(policy: Policy) -> frozenset:
    """The modifiers of :data:`MODIFIERS` that ``policy`` turns on."""
    on = set(policy.modifiers()) | ({"causal"} if policy.causal else set())
    return frozenset(on & set(MODIFIERS))


def holds(name: str, modifiers) -> bool:
    """Whether property ``name`` holds under the set ``modifiers``.

    Raises:
        InputError: an unknown property name.
    """
    check_choice(name, "property", tuple(PROPERTIES))
    rule = PROPERTIES[name]
    modifiers = frozenset(modifiers)
    return modifiers.issuperset(rule.requires) and modifiers.isdisjoint(rule.breaks)
