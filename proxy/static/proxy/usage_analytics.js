// The usage analytics page: draws the numbers the server put in #usage-chart-data (no fetch)
// with the vendored Chart.js.
(function () {
  "use strict";
  const root = document.getElementById("usage-analytics");
  const source = document.getElementById("usage-chart-data");
  if (!root || !source) return;
  const data = JSON.parse(source.textContent);
  const colours = {
    requests: "#417690", errors: "#d9363e", input: "#417690", output: "#f2c94c",
    cached: "#27ae60", cost: "#8e44ad", latency: "#79aec8", firstToken: "#f08a24",
  };
  const base = { responsive: true, maintainAspectRatio: false, animation: false };

  function draw(id, config) {
    config.options = Object.assign({}, base, config.options || {});
    return new Chart(document.getElementById(id), config);
  }

  function bars(label, values, colour, extra) {
    return Object.assign({ label: label, data: values, backgroundColor: colour }, extra || {});
  }

  function line(label, values, colour) {
    return { label: label, data: values, borderColor: colour, backgroundColor: colour,
      tension: 0.25, pointRadius: 2, spanGaps: true };
  }

  draw("chart-usage-requests", {
    type: "bar",
    data: { labels: data.labels, datasets: [
      bars("requests", data.requests, colours.requests),
      bars("failed", data.errors, colours.errors),
    ] },
  });
  draw("chart-usage-tokens", {
    type: "bar",
    data: { labels: data.labels, datasets: [
      bars("input", data.input, colours.input, { stack: "tokens" }),
      bars("output", data.output, colours.output, { stack: "tokens" }),
      bars("cached (part of input)", data.cached, colours.cached),
    ] },
    options: { scales: { x: { stacked: true } } },
  });
  draw("chart-usage-cost", {
    type: "bar",
    data: { labels: data.labels, datasets: [bars("cost (USD)", data.cost, colours.cost)] },
  });
  draw("chart-usage-latency", {
    type: "line",
    data: { labels: data.labels, datasets: [
      line("end to end", data.latency, colours.latency),
      line("first token", data.firstToken, colours.firstToken),
    ] },
  });
  draw("chart-usage-groups", {
    type: "bar",
    data: { labels: data.groups.labels, datasets: [
      bars("requests", data.groups.requests, colours.requests),
      bars("failed", data.groups.errors, colours.errors),
    ] },
    options: { indexAxis: "y" },
  });
  root.dataset.state = "ready";
})();
