"""The page in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

Playwright's own browser download is not used: the test launches the system
browser (``EXACTATTN_CHROMIUM``, default ``/usr/bin/chromium``).  It opens the
page from ``file://``, moves each slider to several stops with the keyboard,
flips the switch, and checks that the numbers in the DOM are the certified
values computed here from fresh runs of the head; that the output dot moves;
that the shares flatten toward 1/n as the divisor grows; that the screenshot is
not blank; and that the page made no network request.  Skipped, with the
reason, where Playwright or the browser is not installed (``.ci/run`` installs
both).
"""

from __future__ import annotations

import os
import struct
import tempfile
import zlib
from fractions import Fraction
from pathlib import Path

import pytest

sync_api = pytest.importorskip("playwright.sync_api",
                               reason="Playwright is not installed (pip install playwright)")

from exactattn.cost import count, derive_at  # noqa: E402
from exactattn.examples import bank_loan, bank_river  # noqa: E402
from exactattn.engines.head import attend  # noqa: E402
from exactattn.page import build_page  # noqa: E402
from exactattn.page.data import DIVISOR_SQUARES  # noqa: E402
from exactattn.page.picture import Frame  # noqa: E402
from exactattn.present.sweep import with_divisor  # noqa: E402

CHROMIUM = os.environ.get("EXACTATTN_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
OWN = 7   # the slider's stop of sqrt(2) = sqrt(d_k), the bank head's own divisor
#: the picture's square: 0 to 1 on both axes (money, nature), ticks every 1/4
FRAME = Frame(Fraction(0), Fraction(1), Fraction(1, 4))

#: a real browser starts in about two seconds: the whole file is slow (like test_docs_examples)
pytestmark = pytest.mark.slow

if not Path(CHROMIUM).exists():
    pytest.skip(f"no browser at {CHROMIUM} (apt-get install chromium, or set "
                "EXACTATTN_CHROMIUM)", allow_module_level=True)


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("browser") / "bank.html"
    path.write_text(build_page([bank_river(), bank_loan()]), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def browser(page_file):
    """One browser with a fresh profile; every request it sees is recorded."""
    requests: list[str] = []
    with sync_api.sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        context = p.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=ARGS, headless=True,
            viewport={"width": 1100, "height": 900})
        context.on("request", lambda r: requests.append(r.url))
        context.requests = requests
        yield context
        context.close()


@pytest.fixture
def page(browser, page_file):
    errors: list[str] = []
    tab = browser.new_page()
    tab.on("pageerror", lambda e: errors.append(str(e)))
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.goto(page_file.as_uri())
    yield tab
    tab.close()
    assert errors == []


def certified(ex, divisor_squared):
    """The query row's shares and output, certified one entry at a time (not in bulk)."""
    t = attend(with_divisor(ex.head, divisor_squared), ex.x)
    i = ex.focus
    return ([t.share(i, j).decimal(4) for j in range(len(ex.x))],
            "(" + ", ".join(t.output(i, c).decimal(4) for c in range(2)) + ")")


def shown(page, k: int):
    shares = page.locator(f"#shares-{k} td.share").all_inner_texts()
    return shares, page.inner_text(f"#output-{k}")


def dot(page, k: int):
    d = page.locator(f'g.sentence-picture[data-sentence="{k}"] circle.output-dot')
    return d.get_attribute("cx"), d.get_attribute("cy")


def move(page, selector: str, stop: int):
    """Move a slider with the keyboard: Home, then one ArrowRight per stop."""
    page.focus(selector)
    page.keyboard.press("Home")
    for _ in range(stop):
        page.keyboard.press("ArrowRight")
    assert page.input_value(selector) == str(stop)


def test_opens_at_the_head_s_own_divisor(page):
    assert page.input_value("#divisor") == str(OWN)
    assert page.inner_text("#divisor-value") == "sqrt(d_k) = sqrt(2) ~ 1.4142 (the head's own)"
    assert shown(page, 0) == certified(bank_river(), Fraction(2))
    assert page.is_visible("#shares-0") and not page.is_visible("#shares-1")
    assert "does no arithmetic" in " ".join(page.inner_text("#certified").split())


def test_the_divisor_slider_shows_the_certified_shares(page):
    river = bank_river()
    seen, dots = [], set()
    for stop in (0, 3, OWN, 12, 20):
        move(page, "#divisor", stop)
        shares, output = shown(page, 0)
        assert (shares, output) == certified(river, DIVISOR_SQUARES[stop]), stop
        seen.append([Fraction(s) for s in shares])
        dots.add(dot(page, 0))
        assert dot(page, 0) == FRAME.px(*(Fraction(v) for v in output[1:-1].split(", ")))
    assert len(dots) == 5                       # the output dot moves with the divisor
    tops = [max(r) for r in seen]
    assert all(a > b for a, b in zip(tops, tops[1:]))          # flatter and flatter
    assert all(abs(s - Fraction(1, 4)) < Fraction(1, 1000) for s in seen[-1])   # ~ 1/n
    assert page.inner_text("#divisor-value") == "128"


def test_none_shows_the_undivided_shares(page):
    move(page, "#divisor", 6)                   # divisor 1
    at_one = shown(page, 0)
    page.check("#divisor-none")
    assert page.is_disabled("#divisor")
    assert shown(page, 0) == at_one == certified(bank_river(), None)
    assert page.inner_text("#divisor-value") == "none: the scores are not divided"
    page.uncheck("#divisor-none")
    assert not page.is_disabled("#divisor")


def test_the_switch_flips_the_sentence_and_the_dot(page):
    before = dot(page, 0)
    page.click("label:has(#sentence-1)")
    assert page.is_visible("#shares-1") and not page.is_visible("#shares-0")
    assert shown(page, 1) == certified(bank_loan(), Fraction(2))
    assert page.get_attribute('g.sentence-picture[data-sentence="0"]', "display") == "none"
    assert page.get_attribute('g.sentence-picture[data-sentence="1"]', "display") is None
    after = dot(page, 1)
    # (0.1382, 0.6044) in the river sentence, the mirror image (0.6044, 0.1382) in the loan one
    assert (before, after) == (("99.8", "172.4"), ("267.6", "340.2"))
    assert page.inner_text("#output-1") == "(0.6044, 0.1382)"
    move(page, "#divisor", 2)                   # the slider drives the visible sentence
    shares, output = shown(page, 1)
    assert (shares, output) == certified(bank_loan(), DIVISOR_SQUARES[2])
    assert dot(page, 1) == FRAME.px(*(Fraction(v) for v in output[1:-1].split(", ")))
    page.click("label:has(#sentence-0)")
    assert shown(page, 0) == certified(bank_river(), DIVISOR_SQUARES[2])


def test_the_length_slider_shows_the_counts(page):
    expected = [count(1000, 2, 2)] + [derive_at(n, 2, 2) for n in (2000, 4000, 8000, 16000)]
    sides = []
    for stop, (n, figures) in enumerate(zip((1000, 2000, 4000, 8000, 16000), expected)):
        move(page, "#length", stop)
        assert page.inner_text("#length-n") == f"{n:,}"
        assert page.inner_text("#length-scores") == f"{n * n:,}"
        assert page.inner_text("#length-score-macs") == f"{figures['scores']:,}"
        assert page.inner_text("#length-total") == f"{figures['total']:,}"
        assert page.inner_text("#length-how") == "derived"     # the count is at n = 16
        assert page.inner_text("#length-score-ratio") == ("\u2014" if stop == 0 else "x 4")
        sides.append(page.get_attribute("#score-square", "width"))
    assert sides == ["10.0", "20.0", "40.0", "80.0", "160.0"]


def test_the_answers_open(page):
    first = page.locator("#questions details").first
    assert not first.locator("p").is_visible()
    first.locator("summary").click()
    assert "0.2764 each" in first.locator("p").inner_text()


def pixels(png: bytes):
    """The RGB(A) pixels of a PNG (8-bit colour, no interlace), row by row."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, head = 8, b"", None
    while pos < len(png):
        size, kind = struct.unpack(">I4s", png[pos:pos + 8])
        chunk = png[pos + 8:pos + 8 + size]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + size
    width, height, depth, colour, _, _, interlace = head
    assert depth == 8 and colour in (2, 6) and interlace == 0
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return rows


def test_the_screenshot_is_not_blank(page):
    rows = pixels(page.locator("#picture").screenshot())
    colours = {p for r in rows for p in r}
    assert len(colours) > 20
    assert (0xE8, 0x71, 0x0A) in colours        # the orange output dot is drawn
    assert len(page.screenshot(full_page=True)) > 50_000   # the whole page, not a blank one


def test_no_network_request(browser, page_file, page):
    page.reload()
    assert browser.requests and all(u == page_file.as_uri() for u in browser.requests), \
        browser.requests
