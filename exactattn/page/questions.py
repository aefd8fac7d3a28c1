"""The page's "check yourself" questions, each answered with the page's own certified numbers.

Every answer quotes values from :class:`~exactattn.page.data.PageNumbers`
(certified decimals, exact rationals, whole-number counts); nothing is
computed here, only chosen and worded.

>>> from exactattn.examples import bank_loan, bank_river
>>> from exactattn.page.data import page_numbers
>>> qs = questions(page_numbers([bank_river(), bank_loan()], lengths=[1000, 2000]))
>>> qs[0][1]
'river and bank, with 0.2764 each: their raw scores tie at 1/2, the largest in the row (the softmax keeps the order of the scores).'
"""

from __future__ import annotations

from ..present.cells import vector


def join(words: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(words) if len(words) <= 2 else ", ".join(words[:-1]) + " and " + words[-1]


def _largest(s, key: str) -> str:
    at = s.at[key]
    top = at["largest"]
    each = " each" if len(top) > 1 else ""
    why = "their raw scores tie at" if len(top) > 1 else "its raw score is"
    return (f"{join([s.words[j] for j in top])}, with {at['shares'][top[0]]}{each}: {why} "
            f"{s.raw[top[0]]}, the largest in the row (the softmax keeps the order of the "
            "scores).")


def questions(nums) -> list[tuple[str, str]]:
    """``(question, answer)`` pairs for the page: the largest share, the two ends of the
    divisor slider, the sentence switch (two sentences or more), the length slider and
    ``none`` against divisor 1."""
    s = nums.sentences[0]
    stops = {stop.key: stop for stop in nums.stops}
    own = stops[nums.own_key]
    numeric = [stop for stop in nums.stops if stop.divisor_squared is not None]
    small, big = numeric[0], numeric[-1]
    word = s.words[s.query]
    out = [(f'In "{s.title}", at the head\'s own divisor {own.label}, which word gets the '
            f'largest share of "{word}"\'s attention?', _largest(s, own.key))]
    out.append((f"Drag the divisor up to {big.label}. What share does each word get, and why?",
                f"Close to the equal share {s.equal} each: {', '.join(s.at[big.key]['shares'])}. "
                "Dividing by a large number brings every score near 0, so the shares flatten "
                f"toward 1/{s.visible} over the {s.visible} words the query sees."))
    tops = [s.words[j] for j, q in enumerate(s.small_limit) if q != "0"]
    out.append((f"Now drag it down to {small.label}, and imagine going on toward 0. Where does "
                "the share go?",
                f"To the largest raw score: at {small.label} the shares are already "
                f"{', '.join(s.at[small.key]['shares'])}; in the limit {join(tops)} "
                f"{'get' if len(tops) > 1 else 'gets'} {s.small_limit[s.words.index(tops[0])]}"
                f"{' each (tied keys split it equally)' if len(tops) > 1 else ''} and the "
                "others 0."))
    if len(nums.sentences) > 1 and s.values is not None and nums.sentences[1].values is not None:
        t = nums.sentences[1]
        other = t.words[t.query]
        same = "the same word" if other == word else f'"{other}"'
        out.append((f'Flip the switch to {t.label} ("{t.title}"). Where does the orange dot (the output of '
                    f'"{other}") go, and why?',
                    f"From {vector(s.at[own.key]['output'])} to "
                    f"{vector(t.at[own.key]['output'])} at divisor {own.label}. The output is "
                    f"the values weighted by the shares, so {same} moves toward the words it "
                    f"now shares most with: {join([t.words[j] for j in t.at[own.key]['largest']])}."))
    rows = nums.lengths
    if len(rows) > 1:
        a, b = (rows[2], rows[3]) if len(rows) > 3 else (rows[-2], rows[-1])
        out.append((f"Slide the length from {a['n']} to {b['n']} tokens. How much more work are "
                    "the scores?",
                    f"{b['score_ratio']} times as much: the score table is n by n, "
                    f"{a['scores']} scores at n = {a['n']} and {b['scores']} at n = {b['n']}. "
                    f"The whole head's multiply-adds grow {b['ratio']} times, since the "
                    "projections only double."))
    one = next((stop for stop in numeric if stop.label == "1"), None)
    if one is not None and "none" in s.at and \
            s.at["none"]["decimals"] == s.at[one.key]["decimals"]:
        out.append(('Tick "none". Which stop of the slider shows the same shares, and why?',
                    f"Divisor 1: dividing by 1 changes nothing, so both give "
                    f"{', '.join(s.at['none']['shares'])}."))
    return out
