// The operators' dashboard: reads /api/admin/dashboard/summary with the admin's session cookie
// and draws it with the vendored Chart.js; refreshes itself every data-refresh-seconds. The range
// tabs choose the cards' and charts' range (the summary's `range`).
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
    const now = data.range.cards;
    const before = data.range.previous;
    text("card-accounts", c.accounts.totalValue);
    text("card-accounts-detail", c.accounts.enabledValue + " active, " + c.accounts.abnormalValue + " not active");
    text("card-requests", now.requests);
    text("card-requests-detail", now.errors + " failed · " + before.label + " " + before.cards.requests +
      " · lifetime " + c.traffic.totalRequests);
    text("card-tokens", now.tokens);
    text("card-tokens-detail", "cost " + now.costUsd + " · " + before.label + " " + before.cards.tokens);
    text("card-cache", now.cacheHitRate);
    text("card-cache-detail", "first token " + now.averageFirstTokenMs + " · lifetime " + c.cache.totalHitRate);
  }

  function trends(range) {
    const labels = range.points.map(function (p) { return range.period === "hour" ? p.time : p.time.slice(5); });
    const pick = function (name) { return range.points.map(function (p) { return p[name]; }); };
    document.querySelectorAll(".dash-period").forEach(function (element) { element.textContent = range.period; });
    text("dashboard-range-label", range.label);
    chart("chart-requests", {
      type: "bar",
      data: { labels: labels, datasets: [
        { label: "requests", data: pick("requestsValue"), backgroundColor: colours.requests },
        { label: "errors", data: pick("errorsValue"), backgroundColor: colours.errors },
      ] },
    });
    chart("chart-latency", {
      type: "line",
      data: { labels: labels, datasets: [
        line("first token (average)", pick("firstTokenLatencyValue"), colours.latency),
        line("end to end (average)", pick("latencyValue"), colours.min),
        line("slowest request", pick("maxLatencyValue"), colours.max),
      ] },
    });
    chart("chart-tokens", {
      type: "bar",
      data: { labels: labels, datasets: [
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
    trends(data.range);
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

  // The range tab: ?range=7d (or range=custom&startDate=…&endDate=…) in the page's own address,
  // so a reload keeps it; passed on to the summary as it is.
  const RANGE_PARAMETERS = ["range", "startDate", "endDate"];

  function rangeQuery() {
    const own = new URLSearchParams(window.location.search);
    const query = new URLSearchParams();
    RANGE_PARAMETERS.forEach(function (name) { if (own.get(name)) query.set(name, own.get(name)); });
    return query;
  }

  function markTab() {
    const chosen = rangeQuery().get("range") || "today";
    document.querySelectorAll("#dashboard-range-tabs [data-range]").forEach(function (tab) {
      tab.classList.toggle("selected", tab.dataset.range === chosen);
    });
    const query = rangeQuery();
    if (query.get("startDate")) document.getElementById("dashboard-range-start").value = query.get("startDate");
    if (query.get("endDate")) document.getElementById("dashboard-range-end").value = query.get("endDate");
  }

  function choose(range) {
    const query = new URLSearchParams();
    if (range !== "today") query.set("range", range);
    if (range === "custom") {
      query.set("startDate", document.getElementById("dashboard-range-start").value);
      query.set("endDate", document.getElementById("dashboard-range-end").value);
    }
    const search = query.toString();
    window.history.replaceState(null, "", window.location.pathname + (search ? "?" + search : ""));
    markTab();
    root.dataset.state = "loading";
    refresh();
  }

  document.querySelectorAll("#dashboard-range-tabs [data-range]").forEach(function (tab) {
    tab.addEventListener("click", function () { choose(tab.dataset.range); });
  });

  // Answers can overtake each other after a tab click: only the newest asked is drawn.
  let asked = 0;

  function refresh() {
    const query = rangeQuery().toString();
    const number = ++asked;
    fetch(root.dataset.summaryUrl + (query ? "?" + query : ""), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status === 401) { window.location.reload(); throw new Error("logged out"); }
        return response.json();
      })
      .then(function (body) {
        if (number !== asked) return;
        if (body.code !== 200) throw new Error(body.message);
        render(body.data);
        text("dashboard-error", "");
        root.dataset.state = "ready";
        root.dataset.refreshes = String(Number(root.dataset.refreshes) + 1);
      })
      .catch(function (error) {
        if (number !== asked) return;
        text("dashboard-error", "Could not refresh: " + error.message);
        if (root.dataset.state === "loading") root.dataset.state = "error";
      });
  }

  markTab();
  refresh();
  window.setInterval(refresh, Math.max(1, Number(root.dataset.refreshSeconds)) * 1000);
})();
