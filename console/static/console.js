// mailstep console: charts, the live audience count, broadcast progress, the erase guard.
// Served from 127.0.0.1 with a strict CSP (no inline script): everything is wired here.
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf"]').content;
  // One colour per series, a person's word for each (the overview's day counters).
  const SERIES = {
    send: ["sent", "#64748b"], delivery: ["delivered", "#2563eb"], open: ["unique opens", "#16a34a"],
    click: ["unique clicks", "#9333ea"], signup: ["sign-ups", "#0891b2"], confirm: ["confirmed", "#854d0e"],
    bounce: ["bounces", "#dc2626"], complaint: ["complaints", "#db2777"], unsubscribe: ["unsubscribes", "#ea580c"],
  };
  // The list's changes per day (list health): each its own colour, none shared with the above.
  const LIST_SERIES = {
    list_new: ["new", "#15803d"], confirm: ["confirmed", "#0e7490"], list_resubscribed: ["resubscribed", "#65a30d"],
    net: ["net growth", "#1e3a8a"], list_unsubscribed: ["unsubscribed", "#c2410c"],
    list_suppressed: ["suppressed", "#b91c1c"], list_erased: ["erased", "#57534e"],
  };
  // Bounces, complaints and unsubscribes are a few where deliveries are hundreds: their own
  // scale (the right axis), so that they do not lie flat on the bottom.
  const SMALL = ["bounce", "complaint", "unsubscribe", "list_unsubscribed", "list_suppressed", "list_erased"];
  const drawn = [];

  function width(el) { return Math.max(240, el.clientWidth || 600); }
  function days(data) { return data.dates.map(d => Date.parse(d + "T00:00:00Z") / 1000); }
  const whole = (u, values) => values.map(v => (Number.isInteger(v) ? v.toLocaleString("en") : ""));

  // Counts per day; the few (SMALL) on their own scale on the right. ``names`` gives each series
  // its words and colour; a scale goes below 0 only when a series does (the net growth).
  function dailyChart(el, data, daily, names) {
    const metrics = Object.keys(daily).filter(m => names[m]);
    const series = [{}].concat(metrics.map(m => ({
      label: names[m][0] + (SMALL.includes(m) ? " (right)" : ""), stroke: names[m][1], width: 2,
      scale: SMALL.includes(m) ? "few" : "many",
    })));
    const axes = [{}, { scale: "many", values: whole }, { scale: "few", side: 1, grid: { show: false }, values: whole }];
    const range = (u, lo, hi) => [Math.min(0, lo), Math.max(4, hi)];
    const scales = { x: { time: true }, many: { range: range }, few: { range: range } };
    const values = [days(data)].concat(metrics.map(m => daily[m]));
    return new uPlot({ width: width(el), height: 260, series: series, axes: axes, scales: scales }, values, el);
  }

  function rateChart(el, data, metric) {
    const xs = days(data);
    const t = data.thresholds[metric];
    const pct = v => (v == null ? null : v * 100);
    const name = metric === "bounce" ? "bounce rate %" : "complaint rate %";
    const series = [{}, { label: name, stroke: "#dc2626", width: 2 },
      { label: "SES review " + (t.review * 100) + "%", stroke: "#f59e0b", dash: [6, 4] },
      { label: "SES pause " + (t.pause * 100) + "%", stroke: "#7f1d1d", dash: [2, 4] }];
    const values = [xs, data.daily_rates[metric].map(pct), xs.map(() => t.review * 100), xs.map(() => t.pause * 100)];
    return new uPlot({ width: width(el), height: 200, series: series, scales: { x: { time: true } } }, values, el);
  }

  function charts() {
    const source = document.getElementById("overview-data");
    if (!source || typeof uPlot === "undefined") return;
    const data = JSON.parse(source.textContent);
    document.querySelectorAll("[data-chart]").forEach(el => {
      const kind = el.dataset.chart;
      const chart = kind === "daily" ? dailyChart(el, data, data.daily, SERIES)
        : kind === "list" ? dailyChart(el, data, data.list.daily, LIST_SERIES)
        : rateChart(el, data, el.dataset.metric);
      drawn.push([el, chart]);
      el.dataset.drawn = "yes";
    });
    let timer = null;
    window.addEventListener("resize", () => {  // redraw at the new width
      clearTimeout(timer);
      timer = setTimeout(() => drawn.forEach(([el, chart]) => {
        chart.setSize({ width: width(el), height: chart.height });
        el.dataset.width = String(width(el));
      }), 150);
    });
  }

  // A table with a header row: each cell learns its column's name (data-label), which a narrow
  // screen shows beside it when the rows become blocks (console.css, table.stack).
  function stackTables() {
    document.querySelectorAll("main table").forEach(table => {
      const heads = [...table.querySelectorAll(":scope > thead > tr > th")].map(th => th.textContent.trim());
      if (!heads.length || table.classList.contains("keep")) return;  // keep: scrolls in its box
      table.classList.add("stack");
      table.querySelectorAll(":scope > tbody > tr").forEach(tr => {
        [...tr.children].forEach((td, i) => {
          if (!heads[i] || td.colSpan > 1) return;
          td.dataset.label = heads[i];
          const value = document.createElement("span");  // one box beside the label
          value.className = "v";
          while (td.firstChild) value.appendChild(td.firstChild);
          td.appendChild(value);
        });
      });
    });
    const here = document.querySelector("header nav a[aria-current]");
    if (here && here.scrollIntoView) here.scrollIntoView({ block: "nearest", inline: "nearest" });
  }

  function post(url, form, extra) {
    const data = new URLSearchParams(form instanceof FormData ? form : new FormData(form));
    Object.entries(extra || {}).forEach(([k, v]) => data.set(k, v));
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRF-Token": csrf, "Content-Type": "application/x-www-form-urlencoded" },
      body: data,
    }).then(r => r.json().then(body => ({ ok: r.ok, body: body })));
  }

  // The live count: each answer counts a part of the audience and hands back a cursor; the
  // parts are added up here until the cursor is null (a large audience counts up on screen).
  // A count asks about the form as it was when the count began (every part the same question),
  // and an edit of the form drops the count under way at once: no answer about an older form
  // shows after it, and no count mixes the parts of two audiences.
  function audience() {
    const form = document.getElementById("broadcast-form");
    if (!form) return;
    const out = document.getElementById("audience");
    const sample = document.getElementById("sample");
    let timer = null;
    let asked = 0;
    function fail(mine, text) {
      if (mine !== asked) return;
      out.dataset.state = "error";
      out.textContent = "Audience: " + text;
    }
    function part(mine, fields, total, cursor) {
      const extra = cursor ? { cursor: cursor, counted: String(total) } : {};
      post("/api/audience", fields, extra).then(({ ok, body }) => {
        if (mine !== asked) return;
        if (!ok) return fail(mine, body.error);
        if (!cursor) {
          sample.textContent = "";
          body.sample.forEach(email => {
            const li = document.createElement("li");
            li.textContent = email;
            sample.appendChild(li);
          });
        }
        total += body.size;
        if (body.cursor) {
          out.textContent = "Audience: counting ... " + total + " so far, " + body.audience;
          part(mine, fields, total, body.cursor);
          return;
        }
        out.dataset.state = "counted";
        out.dataset.size = String(total);
        // an A/B test: each variant's test group and the rest (the whole audience, one answer)
        const groups = Object.entries(body.groups || {}).map(([k, n]) =>
          (k === "rest" ? "the rest " + n + " get the winner" : k + " " + n));
        out.textContent = "Audience: " + total + " subscriber(s), " + body.audience +
          (groups.length ? ". A/B test groups: " + groups.join(", ") : "") +
          (body.warmup ? ". Warm-up: " + body.warmup : "");
      }).catch(() => fail(mine, "cannot count"));
    }
    function count() {
      const mine = ++asked;
      out.dataset.state = "counting";
      out.textContent = "Audience: counting ...";
      part(mine, new FormData(form), 0, null);
    }
    function edited() {
      asked++;  // the count under way is about the form before this edit
      out.dataset.state = "counting";
      clearTimeout(timer);
      timer = setTimeout(count, 400);
    }
    form.addEventListener("input", edited);
    form.addEventListener("change", edited);
    count();
  }

  // The A/B test's fields show while its box is ticked (the server reads them only then).
  function abTest() {
    const box = document.getElementById("ab");
    const fields = document.getElementById("ab-fields");
    if (!box || !fields) return;
    const update = () => { fields.hidden = !box.checked; };
    box.addEventListener("change", update);
    update();
  }

  // The send-at field holds a time without a zone: it is the browser's, whose offset at that
  // date (summer time included) goes with it in tz_offset (minutes east of UTC).
  function sendAt() {
    const at = document.getElementById("at");
    const offset = document.getElementById("tz_offset");
    if (!at || !offset) return;
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "this browser's";
    function update() {
      const when = at.value ? new Date(at.value) : new Date();
      const minutes = -when.getTimezoneOffset();
      offset.value = String(minutes);
      const sign = minutes < 0 ? "-" : "+";
      const hhmm = String(Math.floor(Math.abs(minutes) / 60)).padStart(2, "0") + ":" + String(Math.abs(minutes) % 60).padStart(2, "0");
      const utc = at.value ? " = " + when.toISOString().slice(0, 16).replace("T", " ") + " UTC" : "";
      document.getElementById("tz-note").textContent =
        "Empty: now. The time is in your time zone, " + zone + " (UTC" + sign + hhmm + ")" + utc + ".";
    }
    at.addEventListener("input", update);
    update();
  }

  function progress() {
    const box = document.getElementById("broadcast-progress");
    if (!box) return;
    const id = box.dataset.id;
    const final = ["done", "cancelled", "failed"];
    function show(p) {
      const status = document.getElementById("b-status");
      status.textContent = p.status_text;
      status.dataset.status = p.status;
      status.className = "status " + p.status_tone;
      const bar = document.getElementById("b-bar");
      bar.max = p.audience || 1;
      bar.value = p.processed || 0;
      const n = v => Number(v || 0).toLocaleString("en");
      if (p.status !== "scheduled") document.getElementById("b-count").textContent = n(p.processed) + " / " + n(p.audience) +
        (p.resolved ? "" : final.includes(p.status) ? " (resolution stopped)" : " (resolving)");
      document.getElementById("b-sent").textContent = n(p.sent);
      document.getElementById("b-failed").textContent = n(p.failed);
      const skipped = Object.entries(p.skipped_text || {}).map(([k, v]) => k + ": " + n(v)).join(", ");
      document.getElementById("b-skipped").textContent = skipped || "none";
    }
    function poll() {
      fetch("/api/broadcasts/" + encodeURIComponent(id), { credentials: "same-origin" })
        .then(r => r.json())
        .then(p => { show(p); if (!final.includes(p.status)) setTimeout(poll, 1000); })
        .catch(() => setTimeout(poll, 3000));
    }
    const first = JSON.parse(document.getElementById("progress-data").textContent);
    if (!final.includes(first.status)) setTimeout(poll, 1000);
  }

  // A form whose change needs a typed confirmation (erase a subscriber, resume anyway): its
  // button stays disabled until the input holds what it expects (the server checks it again).
  function typedGuards() {
    document.querySelectorAll("input[data-expect]").forEach((input) => {
      const button = input.form && input.form.querySelector("button");
      if (!button) return;
      const update = () => { button.disabled = input.value.trim() !== input.dataset.expect; };
      input.addEventListener("input", update);
      update();  // what was typed before this script ran counts too
    });
  }

  // A form whose change cannot be taken back (cancel a broadcast) asks first.
  function confirms() {
    document.querySelectorAll("form[data-confirm]").forEach(form => {
      form.addEventListener("submit", event => { if (!window.confirm(form.dataset.confirm)) event.preventDefault(); });
    });
  }

  // The new-broadcast form's preview follows the chosen template; its test send posts the form
  // (template, subject, the test address) and shows the answer beside the button.
  function mailPreview() {
    const select = document.getElementById("template");
    const frame = document.getElementById("template-preview");
    const button = document.getElementById("test-send");
    if (!select || !frame || !button) return;
    const show = () => { if (select.value) frame.src = frame.dataset.src + select.value; };
    select.addEventListener("change", show);
    show();
    const out = document.getElementById("test-sent");
    button.addEventListener("click", () => {
      button.disabled = true;
      out.textContent = "sending ...";
      post("/api/test-send", button.form)
        .then(a => { out.textContent = a.ok ? a.body.message : a.body.error; out.dataset.state = a.ok ? "sent" : "error"; })
        .catch(() => { out.textContent = "not sent: the console did not answer"; out.dataset.state = "error"; })
        .finally(() => { button.disabled = false; });
    });
  }

  document.addEventListener("DOMContentLoaded", () => { confirms(); stackTables(); charts(); audience(); abTest(); sendAt(); progress(); typedGuards(); mailPreview(); });
})();
