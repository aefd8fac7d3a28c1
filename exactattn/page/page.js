"use strict";
(function () {
  const data = JSON.parse(document.getElementById("page-data").textContent);
  const byId = (id) => document.getElementById(id);
  const slider = byId("divisor");
  const none = byId("divisor-none");
  const length = byId("length");
  let sentence = data.initial.sentence;

  function showDivisor() {
    const key = none.checked ? "none" : slider.value;
    slider.disabled = none.checked;
    byId("divisor-value").textContent = data.stops[key].words;
    document.querySelectorAll("section.sentence").forEach((section) => {
      section.hidden = section.dataset.sentence !== sentence;
    });
    document.querySelectorAll("g.sentence-picture").forEach((group) => {
      if (group.dataset.sentence === sentence) {
        group.removeAttribute("display");
      } else {
        group.setAttribute("display", "none");
      }
    });
    const at = data.sentences[sentence].at[key];
    const section = document.querySelector(`section.sentence[data-sentence="${sentence}"]`);
    section.querySelectorAll("td.share").forEach((cell, j) => {
      cell.textContent = at.shares[j];
    });
    section.querySelectorAll("span.fill").forEach((bar, j) => {
      bar.style.width = at.bars[j];
    });
    byId(`output-${sentence}`).textContent = at.output;
    byId(`largest-${sentence}`).textContent = at.largest;
    if (at.dot !== null) {
      const dot = document.querySelector(
        `g.sentence-picture[data-sentence="${sentence}"] circle.output-dot`);
      dot.setAttribute("cx", at.dot.cx);
      dot.setAttribute("cy", at.dot.cy);
    }
  }

  function showLength() {
    const row = data.lengths[length.value];
    byId("length-n").textContent = row.n;
    byId("length-scores").textContent = row.scores;
    byId("length-score-macs").textContent = row.score_macs;
    byId("length-mix-macs").textContent = row.mix_macs;
    byId("length-projection-macs").textContent = row.projection_macs;
    byId("length-total").textContent = row.total;
    byId("length-score-ratio").textContent = row.score_ratio === "" ? "\u2014" : `x ${row.score_ratio}`;
    byId("length-how").textContent = row.how;
    const square = byId("score-square");
    square.setAttribute("width", row.side);
    square.setAttribute("height", row.side);
  }

  document.querySelectorAll('input[name="sentence"]').forEach((radio) => {
    radio.addEventListener("change", () => {
      sentence = radio.value;
      showDivisor();
    });
  });
  slider.addEventListener("input", showDivisor);
  none.addEventListener("change", showDivisor);
  length.addEventListener("input", showLength);
  showDivisor();
  showLength();
}());
