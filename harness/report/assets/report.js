// Draws the report's figures from their JSON data blocks, links witnesses to the timeline,
// and marks the page as rendered (data-rendered on <body>) once every figure is drawn, so
// browser tests and the benchmark know when the page is complete.
(function () {
  "use strict";
  var plotConfig = { displaylogo: false, responsive: true, scrollZoom: false };
  var body = document.body;

  // One figure at a time, in page order, giving the browser a turn between them: the text
  // and the first figures show while the later ones are still being drawn.
  function drawFigures() {
    var blocks = Array.prototype.slice.call(document.querySelectorAll("script[type='application/json'][data-figure]"));
    return blocks.reduce(function (previous, block) {
      return previous.then(function () {
        return new Promise(function (turn) { setTimeout(turn, 0); });
      }).then(function () {
        var target = document.getElementById(block.getAttribute("data-figure"));
        var spec = JSON.parse(block.textContent);
        return Plotly.newPlot(target, spec.data, spec.layout, plotConfig);
      });
    }, Promise.resolve());
  }

  function readJson(id, fallback) {
    var node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : fallback;
  }

  var opTimes = readJson("op-times", {});

  function showInTimeline(opIndex) {
    var times = opTimes[opIndex];
    var figure = document.getElementById("fig-timeline");
    if (times && figure && figure.data) {
      var start = times[0], end = times[1];
      var pad = Math.max((end - start) * 3, 0.05);
      Plotly.relayout(figure, {
        "xaxis.range": [start - pad, end + pad],
        shapes: [{ type: "rect", xref: "x", yref: "paper", x0: start, x1: end, y0: 0, y1: 1,
                   fillcolor: "#ffe066", opacity: 0.45, line: { width: 1, color: "#b8860b" }, layer: "below" }]
      });
    }
    document.querySelectorAll("tr.target-op").forEach(function (row) { row.classList.remove("target-op"); });
    var row = document.getElementById("op-" + opIndex);
    if (row) { row.classList.add("target-op"); }
    var section = document.getElementById("timeline");
    if (section) { section.scrollIntoView({ block: "start" }); }
  }

  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest("a[data-op]") : null;
    if (link) {
      event.preventDefault();
      history.replaceState(null, "", "#op-" + link.getAttribute("data-op"));
      showInTimeline(link.getAttribute("data-op"));
      return;
    }
    var copy = event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (copy) {
      var text = document.getElementById(copy.getAttribute("data-copy")).textContent;
      navigator.clipboard.writeText(text).then(function () { copy.textContent = "copied"; },
                                               function () { copy.textContent = "select and copy"; });
    }
  });

  drawFigures().then(function () {
    var hash = window.location.hash.match(/^#op-(\d+)$/);
    if (hash) { showInTimeline(hash[1]); }
    window.logquakeRenderedMs = performance.now();
    body.setAttribute("data-rendered", "true");
  }, function (error) {
    body.setAttribute("data-rendered", "error");
    body.setAttribute("data-render-error", String(error));
  });
})();
