// The operators' dashboard: reads /api/admin/dashboard/summary with the admin's session cookie
// and draws it with the vendored Chart.js; refreshes itself every data-refresh-seconds.
(function () {
  "use strict";
  const root = document.getElementById("dashboard");
  if (!root) return;
  const charts = {};
  const colours = {
    requests: "#417690", errors: "#d9363e", latency: "#79aec8", max: "#f08a24", min: "#27ae60",
    input: "#417690", output: "#f2c94c", cached: "#27ae60",
  };

  function text(id, value) {
    const element = document.getElementById(id);
    if (element) element.textContent = value == null ? "-" : String(value);
  }

  function chart(id, config) {
    if (charts[id]) {
      charts[id].data = config.data;
      charts[id].update("none");
      return charts[id];
    }
    const canvas = document.getElementById(id);
    config.options = Object.assign(
      { responsive: true, maintainAspectRatio: false, animation: false },
      config.options || {}
    );
    charts[id] = new Chart(canvas, config);
    return charts[id];
  }

  function line(label, values, colour, extra) {
    return Object.assign(
      { label: label, data: values, borderColor: colour, backgroundColor: colour, tension: 0.25,
        pointRadius: 2, spanGaps: true },
      extra || {}
    );
  }

  function cards(data) {
    const c = data.cards;
    text("card-accounts", c.accounts.totalValue);
    text("card-accounts-detail", c.accounts.enabledValue + " active, " + c.accounts.abnormalValue + " not active");
    text("card-requests", c.traffic.todayRequests);
    text("card-requests-detail", "yesterday " + c.traffic.yesterdayRequests + " · lifetime " + c.traffic.totalRequests);
    text("card-tokens", c.tokens.todayTokens);
    text("card-tokens-detail", "cost " + c.tokens.todayCostUsd + " · yesterday " + c.tokens.yesterdayTokens);
    text("card-cache", c.cache.todayHitRate);
    text("card-cache-detail", "first token " + c.cache.averageFirstTokenLatencyMs + " · lifetime " + c.cache.totalHitRate);
  }

  function trends(trend) {
    const hours = trend.points.map(function (p) { return p.time + ":00"; });
    const pick = function (name) { return trend.points.map(function (p) { return p[name]; }); };
    chart("chart-requests", {
      type: "bar",
      data: { labels: hours, datasets: [
        { label: "requests", data: pick("requestsValue"), backgroundColor: colours.requests },
        { label: "errors", data: pick("errorsValue"), backgroundColor: colours.errors },
      ] },
    });
    chart("chart-latency", {
      type: "line",
      data: { labels: hours, datasets: [
        line("average", pick("latencyValue"), colours.latency),
        line("slowest 15 min", pick("maxLatencyValue"), colours.max),
        line("fastest 15 min", pick("minLatencyValue"), colours.min),
      ] },
    });
    chart("chart-tokens", {
      type: "bar",
      data: { labels: hours, datasets: [
        { label: "input", data: pick("inputTokensValue"), backgroundColor: colours.input, stack: "t" },
        { label: "output", data: pick("outputTokensValue"), backgroundColor: colours.output, stack: "t" },
        { label: "cached (part of input)", data: pick("cachedTokensValue"), backgroundColor: colours.cached },
      ] },
      options: { scales: { x: { stacked: true } } },
    });
  }

  function pool(data) {
    const p = data.poolSummary;
    chart("chart-pool", {
      type: "doughnut",
      data: {
        labels: ["active", "quota exhausted", "expired", "disabled", "banned"],
        datasets: [{ data: [p.active, p.quotaExhausted, p.expired, p.disabled, p.banned],
          backgroundColor: ["#27ae60", "#f2c94c", "#f08a24", "#cfcfcf", "#d9363e"] }],
      },
      options: { plugins: { title: { display: true, text: "accounts (" + p.total + ")" } } },
    });
    const cap = data.capacityInfo;
    chart("chart-capacity", {
      type: "doughnut",
      data: {
        labels: ["in use", "free"],
        datasets: [{ data: [cap.usedSlots, cap.availableSlots], backgroundColor: ["#417690", "#e8e8e8"] }],
      },
      options: { plugins: { title: { display: true, text: "slots (" + cap.totalSlots + ")" } } },
    });
    text("capacity-text", cap.eligibleAccounts + " eligible account(s) × " + cap.maxConcurrentPerAccount +
      " = " + cap.totalSlots + " slots, " + cap.usedSlots + " in use; " + p.refreshing +
      " refreshing; rotation: " + data.rotationStrategy);
  }

  function health(timeline) {
    const box = document.getElementById("health-timeline");
    box.replaceChildren();
    for (let index = 0; index < timeline.points.length; index += 1) {
      const cell = document.createElement("span");
      cell.className = "h" + timeline.points[index];
      const minutes = index * 15;
      cell.title = String(Math.floor(minutes / 60)).padStart(2, "0") + ":" + String(minutes % 60).padStart(2, "0");
      box.appendChild(cell);
    }
    text("health-title", timeline.title);
    text("health-reliability", "reliability " + timeline.reliabilityDisplay);
    text("health-description", timeline.description);
  }

  function rows(tableId, items, columns) {
    const body = document.querySelector("#" + tableId + " tbody");
    body.replaceChildren();
    items.forEach(function (item) {
      const row = document.createElement("tr");
      columns(item).forEach(function (value) {
        const cell = document.createElement("td");
        cell.textContent = value == null ? "-" : String(value);
        row.appendChild(cell);
      });
      body.appendChild(row);
    });
  }

  const OUTLOOK = {
    exhausts: "runs out", resets_first: "resets first", exhausted: "used up",
    idle: "not burning", unknown: "not known",
  };

  function when(window) {
    const word = OUTLOOK[window.outlook] || window.outlook;
    if (window.outlook === "exhausts") return word + " " + window.exhaustsAt.replace("T", " ").slice(0, 16);
    if (window.outlook === "exhausted" && window.exhaustsAt) return word + " until " + window.exhaustsAt.replace("T", " ").slice(0, 16);
    return word;
  }

  function runway(data) {
    const r = data.quotaRunway;
    text("runway-five-hour", when(r.pool["five-hour"]));
    text("runway-weekly", when(r.pool.weekly));
    text("runway-burn", r.poolBurnTokensPerHour + " tokens/h since " + r.burnMeasuredSince.replace("T", " ").slice(11, 16));
    rows("runway-accounts", r.accounts, function (a) {
      const byKey = {};
      a.windows.forEach(function (w) { byKey[w.key] = w; });
      const cell = function (key) {
        const w = byKey[key];
        return w ? w.usedPercent + "% · " + when(w) : "-";
      };
      const burn = a.dailyBurn;
      const today = burn.dailyBurnCapTokens == null ? String(burn.burnedTodayTokens)
        : burn.burnedTodayTokens + " / " + burn.dailyBurnCapTokens + (burn.overCap ? " · capped until 00:00 UTC" : "");
      return [a.email || a.id, a.burnTokensPerHour, cell("codex-five-hour"), cell("codex-weekly"), today];
    });
  }

  function render(data) {
    cards(data);
    trends(data.trend);
    pool(data);
    health(data.healthTimeline);
    runway(data);
    rows("account-usage", data.accountUsage, function (a) {
      return [a.email || a.id, a.planType, a.tokensDisplay,
        a.quotaUsedPercent == null ? "-" : a.quotaUsedPercent + "%", a.lastUsed];
    });
    rows("latest-records", data.usageRecords, function (r) {
      return [r.createdAtDisplay, r.model, r.accountEmail || r.accountId,
        r.tokenDetails.totalTokensDisplay, r.costDetails ? r.costDetails.totalCostDisplay : "-"];
    });
    text("dashboard-updated", "Updated " + data.generatedAt + ".");
  }

  function refresh() {
    fetch(root.dataset.summaryUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status === 401) { window.location.reload(); throw new Error("logged out"); }
        return response.json();
      })
      .then(function (body) {
        if (body.code !== 200) throw new Error(body.message);
        render(body.data);
        text("dashboard-error", "");
        root.dataset.state = "ready";
        root.dataset.refreshes = String(Number(root.dataset.refreshes) + 1);
      })
      .catch(function (error) {
        text("dashboard-error", "Could not refresh: " + error.message);
        if (root.dataset.state === "loading") root.dataset.state = "error";
      });
  }

  refresh();
  window.setInterval(refresh, Math.max(1, Number(root.dataset.refreshSeconds)) * 1000);
})();
