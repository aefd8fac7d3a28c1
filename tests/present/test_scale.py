"""The ``scale`` experiment: exact expectations, bands, determinism, bad arguments."""

import io
import json
from fractions import Fraction
from pathlib import Path

import mpmath
import pytest
import sympy
from flint import arb
from sympy.stats import ChiSquared, E

from exactattn import scale
from exactattn.numbers.digits import certify
from exactattn.errors import InputError
from exactattn.scale import (MAX_DRAWS, certify_w, check_draws, expected_range, expected_w,
                             mean_square_variance, measure, scale_sections)

CMD = ["scale", "--widths", "4,16,64,256", "--trials", "1000", "--seed", "82", "--tokens", "4"]




# exact expectations -----------------------------------------------------
@pytest.mark.parametrize("n, closed", [
    (2, lambda: 2 / arb.pi().sqrt()),
    (3, lambda: 3 / arb.pi().sqrt()),
    (4, lambda: 12 * arb(2).sqrt().atan() / arb.pi() ** 1.5),
])
def test_expected_normal_range_matches_closed_forms(n, closed):
    assert certify_w(n, 18) == certify(lambda prec: closed(), 18)


def test_expected_w_is_a_tight_ball():
    from exactattn.numbers.digits import working_precision
    with working_precision(128):
        w = expected_w(10, 128)
    assert w.rad() < arb("1e-30")
    assert certify_w(10, 4) == "3.0775"  # the classical table value for n = 10


@pytest.mark.parametrize("n, d_k, divided", [(4, 4, False), (5, 7, True), (3, 256, False)])
def test_expected_range_against_mpmath_quadrature(n, d_k, divided):
    mpmath.mp.dps = 30
    w = mpmath.quad(lambda x: 1 - mpmath.ncdf(x) ** n - (1 - mpmath.ncdf(x)) ** n,
                    [-mpmath.inf, 0, mpmath.inf])
    c = mpmath.sqrt(2) * mpmath.exp(mpmath.loggamma((d_k + 1) / mpmath.mpf(2))
                                    - mpmath.loggamma(d_k / mpmath.mpf(2)))
    want = w * c / (mpmath.sqrt(d_k) if divided else 1)
    got = expected_range(n, d_k, divided=divided, places=12)
    assert type(got) is str
    assert abs(mpmath.mpf(got) - want) <= mpmath.mpf("5e-13")


def test_chi_mean_closed_form_d4():
    # E|q| for d_k = 4 is 3 sqrt(2 pi) / 4; times E[W_4]
    closed = lambda: 3 * (2 * arb.pi()).sqrt() / 4 * 12 * arb(2).sqrt().atan() / arb.pi() ** 1.5  # noqa: E731
    assert expected_range(4, 4, divided=False, places=15) == certify(lambda p: closed(), 15)


@pytest.mark.parametrize("n, d_k", [(4, 4), (2, 16), (7, 3)])
def test_mean_square_variance_from_chi_square_moments(n, d_k):
    Q, C = ChiSquared("Q", d_k), ChiSquared("C", n)
    second = E(Q ** 2) * E(C ** 2) / n ** 2
    want = sympy.Rational(second - d_k ** 2)
    got = mean_square_variance(n, d_k, False)
    assert type(got) is Fraction and got == Fraction(int(want.p), int(want.q))
    assert mean_square_variance(n, d_k, True) == got / d_k ** 2


# the experiment ------------------------------------------------------
def test_seed_82_every_measurement_inside_its_band(cli):
    rc, out, err = cli(*CMD)
    assert rc == 0 and err == ""
    assert "every measurement lies inside its band" in out
    spread = out.split("\n\n")[0].splitlines()[4:12]
    assert len(spread) == 8 and all(line.split()[6] == "yes" and line.split()[-1] == "yes"
                                    for line in spread)
    # the expected columns are the certified values
    assert spread[0].split()[:4][3] == "3.8704" and spread[1].split()[3] == "1.9352"
    assert spread[7].split()[3] == expected_range(4, 256, divided=True)
    assert [line.split()[8] for line in spread] == ["2.0000", "1.0000", "4.0000", "1.0000",
                                                    "8.0000", "1.0000", "16.0000", "1.0000"]


def test_same_seed_byte_identical_other_seed_differs(cli):
    argv = ["scale", "--widths", "4,16", "--trials", "200", "--seed", "7"]
    _, a, _ = cli(*argv)
    _, b, _ = cli(*argv)
    _, c, _ = cli(*argv[:-1], "8")
    assert a == b and a != c


def test_a_width_does_not_depend_on_the_others():
    one = measure(16, 100, 3, 4)
    again = scale_sections([4, 16], trials=100, seed=3, tokens=4)[0].data["rows"]
    assert repr(one[0].mean_range) == again[2]["mean_range"]
    assert repr(one[1].mean_square) == again[3]["mean_square"]


def test_divided_is_undivided_over_sqrt_dk():
    und, div = measure(64, 50, 1, 4)
    assert div.mean_range == pytest.approx(und.mean_range / 8, rel=1e-15)
    assert div.mean_square == pytest.approx(und.mean_square / 64, rel=1e-15)
    assert div.mean_biggest_share < und.mean_biggest_share
    assert und.concentrated >= div.concentrated


def test_flag_and_exit_0_when_outside(cli, monkeypatch):
    monkeypatch.setattr(scale, "BAND_SE", 0)
    rc, out, err = cli("scale", "--widths", "4", "--trials", "20")
    assert rc == 0 and err == ""
    assert " NO" in out and "4 of 4 measurements lie outside their band (NO)" in out
    assert "try another seed or more trials" in out


def test_small_trials_exit_0_and_say_the_band_is_rough(cli):
    rc, out, err = cli("scale", "--widths", "4,16", "--trials", "10", "--format", "json")
    assert rc == 0 and err == ""
    notes = json.loads(out)["tables"][0]["notes"]
    assert "band: expected +- 3 standard errors of the mean of the 10 rows" in notes[3]
    assert notes[4].startswith("the band treats the mean of the rows as normal (central "
                               "limit theorem)")
    assert "with only 10 trials that approximation is rough (it wants about 100 or more)" \
        in notes[4]
    assert "a NO is a chance event, not a failure" in notes[4]


def test_exit_status_is_documented(cli):
    rc, out, _ = cli("scale", "--help")
    assert rc == 0
    text = " ".join(out.split())
    assert "Exit status: 0 when the tables were printed, NO flags included" in text
    assert "2 for a bad option" in text and "--trials 2..10000000" in text
    doc = (Path(__file__).parents[2] / "docs" / "examples.md").read_text(encoding="utf-8")
    assert "the exit status is 0" in " ".join(doc.split())


@pytest.mark.parametrize("fmt", ["markdown", "latex", "json", "csv"])
def test_every_format(cli, fmt):
    rc, out, _ = cli("scale", "--widths", "4,16", "--trials", "100", "--seed", "82",
                     "--format", fmt)
    assert rc == 0 and out
    if fmt == "json":
        doc = json.loads(out)
        assert doc["mode"] == "scale" and doc["seed"] == 82 and doc["widths"] == [4, 16]
        spread = doc["tables"][0]["data"]
        assert spread["all_inside"] is True and len(spread["rows"]) == 4
        assert spread["rows"][0]["expected_variance"] == "4"
        assert spread["rows"][0]["mean_square_variance"] == "20"


def test_progress_goes_to_stderr_only(cli):
    _, plain, err0 = cli("scale", "--widths", "4", "--trials", "30")
    _, shown, err1 = cli("scale", "--widths", "4", "--trials", "30", "--progress")
    assert err0 == "" and plain == shown
    assert err1.startswith("\rscale [") and err1.endswith("30/30 (d_k = 4)\n")
    assert err1.count("\n") == 1
    # --no-progress turns the bar off, as on every command (the one switch of present.stream)
    _, quiet, err2 = cli("scale", "--widths", "4", "--trials", "30", "--progress", "--no-progress")
    assert err2 == "" and quiet == plain


def test_progress_fills_by_draws_not_rows(cli, monkeypatch):
    _, _, err = cli("scale", "--widths", "4,16", "--trials", "10", "--progress")
    frames = err.rstrip("\n").split("\r")[1:]
    assert [f.split("] ")[1] for f in frames] == ["10/20 (d_k = 4)", "20/20 (d_k = 16)"]
    bar = {f.split("] ")[1]: f[len("scale ["):f.index("]")] for f in frames}
    # after the d_k = 4 rows, 4/(4 + 16) of the draws are done: 6 of 30 marks
    assert bar["10/20 (d_k = 4)"] == "#" * 6 + "." * 24
    assert bar["20/20 (d_k = 16)"] == "#" * 30
    # blocks of 2 rows (4 x 5 draws each at d_k = 4): the bar advances block by block
    monkeypatch.setattr(scale, "BLOCK", 40)
    _, _, err = cli("scale", "--widths", "4", "--trials", "10", "--progress")
    frames = err.rstrip("\n").split("\r")[1:]
    assert [f.split("] ")[1] for f in frames] == [f"{k}/10 (d_k = 4)" for k in (2, 4, 6, 8, 10)]


@pytest.mark.parametrize("d_k, tokens, block", [(4, 4, 40), (4, 4, 7), (16, 3, 20), (3, 5, 1)])
def test_blocks_cut_one_stream(monkeypatch, d_k, tokens, block):
    """The block size changes neither the draws nor the scores (a long row draws its keys a
    block at a time, in the same order)."""
    import numpy as np
    whole = np.concatenate(list(scale.score_blocks(scale.generator(5, d_k, tokens), d_k, tokens,
                                                   9)))
    monkeypatch.setattr(scale, "BLOCK", block)
    cut = list(scale.score_blocks(scale.generator(5, d_k, tokens), d_k, tokens, 9))
    assert len(cut) > 1 and np.array_equal(np.concatenate(cut), whole)
    assert whole.shape == (9, tokens) and whole.dtype == np.float64


def test_draws_are_independent_standard_normals():
    """Scores q . k have mean 0 and variance d_k (a loose check: 20000 rows)."""
    und, div = measure(16, 20_000, 11, 4)
    assert abs(und.mean_square - 16) < 0.5 and abs(div.mean_square - 1) < 0.05


def test_an_interrupted_progress_bar_ends_its_line(cli, monkeypatch):
    def stop(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(scale, "expected_range", stop)
    rc, out, err = cli("scale", "--widths", "4,16", "--trials", "10", "--progress")
    assert rc == 130 and out == ""
    assert err.endswith("10/20 (d_k = 4)\nexactattn: interrupted\n")


def test_progress_follows_the_terminal(cli, monkeypatch):
    class TTY(io.StringIO):
        def isatty(self):
            return True
    err = TTY()
    monkeypatch.setattr("sys.stderr", err)
    rc, out, _ = cli("scale", "--widths", "4", "--trials", "10", "--seed", "1")
    assert rc == 0
    assert "10/10" in err.getvalue() and "scale [" not in out


LONG = "9" * 60
SHORT = "'" + "9" * 40 + "\u2026'"


@pytest.mark.parametrize("argv, message", [
    (["--widths", "4,0"], "--widths must be a whole number from 1 to 65536 (got '0')"),
    (["--widths", ""], "--widths must be a comma-separated list of 1 to 64 whole numbers "
                       "(got '')"),
    (["--widths", "4,x"], "--widths must be a whole number from 1 to 65536 (got 'x')"),
    (["--widths", "4.5"], "(got '4.5')"),
    (["--widths", "65537"], "--widths must be a whole number from 1 to 65536 (got '65537')"),
    (["--widths", "4," + LONG], f"--widths must be a whole number from 1 to 65536 (got {SHORT})"),
    (["--widths", ",".join(map(str, range(1, 66)))],
     "--widths must be a comma-separated list of 1 to 64 whole numbers (got '1,2,3,"),
    (["--widths", "4,4"], "--widths must list each width once (got '4,4'); drop the repeats"),
    (["--trials", "-5"], "--trials must be a whole number from 2 to 10000000 (got '-5')"),
    (["--trials", "1"], "--trials must be a whole number from 2 to 10000000 (got '1')"),
    (["--trials", "ten"], "--trials must be a whole number from 2 to 10000000 (got 'ten')"),
    (["--trials", "10000001"], "--trials must be a whole number from 2 to 10000000 "
                               "(got '10000001')"),
    (["--trials", LONG], f"--trials must be a whole number from 2 to 10000000 (got {SHORT})"),
    (["--tokens", "1"], "--tokens must be a whole number from 2 to 10000 (got '1')"),
    (["--tokens", "10001"], "--tokens must be a whole number from 2 to 10000 (got '10001')"),
    (["--seed", "-1"], "--seed must be a whole number from 0 to 18446744073709551615 "
                       "(got '-1')"),
    (["--seed", "0x10"], "--seed must be a whole number from 0 to 18446744073709551615 "
                         "(got '0x10')"),
    (["--seed", str(2 ** 64)], "(got '18446744073709551616')"),
    (["--trials", "10000000"], "--trials x sum(--widths) x (--tokens + 1) must be at most "
                               "200000000 normal draws (got 10000000 x 340 x 5 = 17000000000); "
                               "lower --trials or drop the widest --widths"),
    (["--widths", "65536", "--tokens", "10000", "--trials", "2"],
     "(got 2 x 65536 x 10001 = 1310851072)"),
    (["--digits", "99"], "--digits must be a whole number from 0 to 50 (got '99')"),
    (["--format", "svg"], "--format must be one of text, markdown, latex, json, csv "
                          "(got 'svg')"),
    (["extra"], "scale takes no argument 'extra'"),
])
def test_bad_arguments_exit_2_with_one_line(cli, argv, message):
    rc, out, err = cli("scale", *argv)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("exactattn: error: ")
    assert message in lines[0], lines[0]
    assert len(lines[0]) < 300


@pytest.mark.parametrize("call, message", [
    (lambda: measure(4, 10_000_001, 0, 4), "trials must be a whole number from 2 to 10000000 "
                                           "(got 10000001)"),
    (lambda: measure(65_537, 2, 0, 4), "d_k must be a whole number from 1 to 65536 "
                                       "(got 65537)"),
    (lambda: measure(4, 2, 0, 10_001), "tokens must be a whole number from 2 to 10000 "
                                       "(got 10001)"),
    (lambda: measure(4, 2, -1, 4), "seed must be a whole number from 0 to 18446744073709551615 "
                                   "(got -1)"),
    (lambda: measure(4, "10", 0, 4), "trials must be a whole number from 2 to 10000000 "
                                     "(got '10')"),
    (lambda: measure(4096, 10_000, 0, 9), "trials x sum(d_k) x (tokens + 1) must be at most "
                                          "200000000 normal draws"),
    (lambda: scale_sections([4, 16], trials=10_000_000), "trials x sum(widths) x (tokens + 1) "
                                                         "must be at most 200000000"),
    (lambda: scale_sections("4," + LONG), "widths must be a whole number from 1 to 65536 "
                                          f"(got {SHORT}"),
    (lambda: scale_sections([4, 4]), "widths must list each width once (got 4,4)"),
])
def test_api_messages_name_the_keyword(call, message):
    with pytest.raises(InputError) as e:
        call()
    assert str(e.value).startswith(message)
    assert "--" not in str(e.value).split("(got")[0]


def test_check_draws_counts_every_normal_draw():
    assert check_draws(1000, [4, 16, 64, 256], 4) == 1000 * 340 * 5
    assert check_draws(MAX_DRAWS // 20, [4], 4) == MAX_DRAWS
    with pytest.raises(InputError):
        check_draws(MAX_DRAWS // 20 + 1, [4], 4)


@pytest.mark.parametrize("value", [[], [0], [True], "", " , "])
def test_bad_widths_are_refused(value):
    with pytest.raises(InputError, match="widths must be"):
        scale_sections(value)


def test_expected_range_rejects_one_token():
    with pytest.raises(InputError, match=r"tokens must be a whole number from 2 to 10000 \(got 1\)"):
        expected_range(1, 4, divided=False)
