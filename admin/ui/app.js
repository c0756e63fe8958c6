// orderstore dashboard: polls /v1/status every second and the latest dead
// letters every 5 seconds, and redraws in place (no reload, no build step).
"use strict";

const $ = (id) => document.getElementById(id);
const history = []; // {t, lag}
const WINDOW_MS = 5 * 60 * 1000;
let lastProcessed = null, lastTime = null;
const ingestHistory = []; // {t, lag: events/s}
let lastAcked = null, lastAckedTime = null;

function fmtInt(n) { return (n ?? 0).toLocaleString("en-US"); }
function fmtBytes(n) {
  if (n < 0) return "unlimited";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + u[i];
}
function fmtDur(s) {
  if (!s || s <= 0) return "0s";
  if (s < 60) return s.toFixed(1) + "s";
  if (s < 3600) return (s / 60).toFixed(1) + "m";
  if (s < 86400) return (s / 3600).toFixed(1) + "h";
  return (s / 86400).toFixed(1) + "d";
}
function setText(id, v) { const e = $(id); if (e.textContent !== String(v)) e.textContent = v; }
function badge(id, text, cls) { const e = $(id); e.textContent = text; e.className = "badge " + cls; }

async function getJSON(url) {
  const r = await fetch(url, { credentials: "same-origin", cache: "no-store" });
  if (r.status === 401) { location.reload(); throw new Error("unauthorized"); }
  if (!r.ok && r.status !== 503) throw new Error(url + ": HTTP " + r.status);
  return r.json();
}

function render(st) {
  badge("status", st.status, st.status === "ready" ? "ok" : st.status === "recovering" ? "warn" : "bad");
  setText("version", "v" + st.build.version + " · nats-server " + st.build.nats_server_version);
  setText("durability", "durability: " + st.durability.mode + " — " + st.durability.description);
  renderIngest(st.ingest);
  const s = st.stream;
  setText("stream-name", s.name);
  setText("stream-messages", fmtInt(s.messages));
  setText("stream-seqs", s.messages ? fmtInt(s.first_seq) + " … " + fmtInt(s.last_seq) : "empty");
  setText("stream-bytes", fmtBytes(s.bytes));
  setText("stream-max-bytes", fmtBytes(s.max_bytes));
  $("bytes-bar").style.width = Math.min(100, s.bytes_percent || 0) + "%";
  setText("stream-age", fmtDur(s.oldest_age_seconds));
  setText("stream-max-age", s.max_age_seconds ? fmtDur(s.max_age_seconds) : "forever");
  $("age-bar").style.width = s.max_age_seconds ? Math.min(100, 100 * s.oldest_age_seconds / s.max_age_seconds) + "%" : "0";

  const p = st.processor;
  if (p) {
    badge("proc-running", p.running ? "running" : "stopped", p.running ? "ok" : "bad");
    setText("processed", fmtInt(p.processed));
    setText("failed", fmtInt(p.failed));
    setText("duplicates", fmtInt(p.duplicates));
    setText("last-applied", fmtInt(p.last_applied_seq));
    const now = Date.now();
    if (lastProcessed !== null && now > lastTime) {
      setText("rate", ((p.processed - lastProcessed) * 1000 / (now - lastTime)).toFixed(1));
    }
    lastProcessed = p.processed; lastTime = now;
  } else {
    badge("proc-running", "disabled", "");
  }
  const c = st.consumer;
  if (c) {
    const lag = c.pending + c.ack_pending;
    setText("lag", fmtInt(lag));
    setText("behind", fmtDur(c.seconds_behind));
    setText("redelivered", fmtInt(c.redelivered));
    history.push({ t: Date.now(), lag });
    while (history.length && history[0].t < Date.now() - WINDOW_MS) history.shift();
    drawChart();
  }
  setText("dlq-name", st.dead_letters.stream);
  setText("dlq-depth", fmtInt(st.dead_letters.messages));
  setText("store-dir", st.store.dir);
  setText("store-free", fmtBytes(st.store.free_bytes));
  renderTopology(st.topology);
  const ul = $("checks");
  ul.replaceChildren(...st.checks.map((ch) => {
    const li = document.createElement("li");
    li.className = ch.ok ? "ok" : "bad";
    li.textContent = ch.name + (ch.ok ? ": ok" : ": " + ch.reason);
    return li;
  }));
  setText("updated", new Date().toLocaleTimeString());
}

function drawChart() { drawSeries("lag-chart", history); }

// drawSeries draws points {t, lag} of the last WINDOW_MS on canvas id.
function drawSeries(id, history) {
  const cv = $(id), ctx = cv.getContext("2d");
  const w = cv.width, h = cv.height, pad = 16, left = 44;
  ctx.clearRect(0, 0, w, h);
  const max = Math.max(10, ...history.map((x) => x.lag));
  ctx.strokeStyle = "#e3e6eb"; ctx.fillStyle = "#6b7385"; ctx.font = "11px system-ui";
  for (const f of [0, 0.5, 1]) {
    const y = h - pad - f * (h - 2 * pad);
    ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(w - 4, y); ctx.stroke();
    ctx.fillText(fmtInt(Math.round(max * f)), 2, y + 4);
  }
  if (history.length < 2) return;
  const t0 = Date.now() - WINDOW_MS;
  ctx.strokeStyle = "#3367d6"; ctx.lineWidth = 2; ctx.beginPath();
  history.forEach((pt, i) => {
    const x = left + (pt.t - t0) / WINDOW_MS * (w - left - 4);
    const y = h - pad - pt.lag / max * (h - 2 * pad);
    i ? ctx.lineTo(x, y) : ctx.moveTo(x, y);
  });
  ctx.stroke();
}

// renderTopology shows the cluster (quorum, leaders, replicas), the leaf
// links and a hub's sources; hidden on a lone node.
function renderTopology(t) {
  $("topology").hidden = !t;
  if (!t) return;
  setText("topo-node", t.node + (t.domain ? " · domain " + t.domain : ""));
  const lines = [];
  const c = t.cluster;
  if (c) {
    lines.push([c.quorum ? "ok" : "bad", "cluster " + c.name + ": " + (c.quorum ? "quorum" : "NO QUORUM") +
      ", meta leader " + (c.meta_leader || "none") + ", " + c.routes_up + " of " + c.routes.length + " routes up"]);
    for (const g of [c.stream, c.consumer]) {
      if (!g) continue;
      const reps = (g.replicas || []).map((r) => r.name + (r.offline ? " offline" : r.current ? " current" : " behind " + r.lag)).join(", ");
      lines.push([g.leader ? "ok" : "bad", g.name + ": leader " + (g.leader || "none") + (reps ? "; " + reps : "")]);
    }
  }
  for (const l of t.leafnodes || []) {
    lines.push([l.connected ? "ok" : "bad", "leaf link " + l.remote + (l.connected ? " connected" + (l.rtt ? ", rtt " + l.rtt : "") : " down")]);
  }
  for (const s of t.sources || []) {
    const state = s.stalled ? "STALLED " + fmtInt(s.behind) + " behind" : !s.reachable ? "edge unreachable" :
      s.behind ? fmtInt(s.behind) + " behind (" + fmtDur(s.behind_seconds) + ")" : "in step";
    lines.push([s.stalled ? "bad" : s.reachable && !s.behind ? "ok" : "warn",
      "source " + s.edge + ": " + state + ", up to edge seq " + fmtInt(s.sourced_seq) + " of " + fmtInt(s.edge_last_seq)]);
  }
  $("topo-lines").replaceChildren(...lines.map(([cls, text]) => {
    const li = document.createElement("li");
    li.className = cls;
    li.textContent = text;
    return li;
  }));
}

function renderDLQ(items) {
  const tb = $("dlq-rows");
  if (!items || !items.length) {
    tb.innerHTML = '<tr><td colspan="5" class="muted">none</td></tr>';
    return;
  }
  tb.replaceChildren(...items.slice().reverse().map((d) => {
    const tr = document.createElement("tr");
    for (const [v, cls] of [[d.seq], [d.subject], [d.original_seq], [d.deliveries], [d.error, "err"]]) {
      const td = document.createElement("td");
      td.textContent = v; if (cls) { td.className = cls; td.title = v; }
      tr.appendChild(td);
    }
    return tr;
  }));
}

async function tick() {
  try {
    const st = await getJSON("/v1/status");
    if (st.error) throw new Error(st.error);
    render(st);
    $("error").hidden = true;
  } catch (e) {
    $("error").hidden = false;
    setText("error", "cannot reach orderstore: " + e.message);
  }
}
async function tickDLQ() {
  try { renderDLQ((await getJSON("/v1/dlq?latest&limit=5")).items); } catch (e) { /* shown by tick */ }
}

tick(); tickDLQ();
setInterval(tick, 1000);
setInterval(tickDLQ, 5000);

// renderIngest shows group commit's figures: the acked rate (from the
// counter's change between polls), the sync time's quantiles, the mean
// batch, what waits and the sync errors.
function renderIngest(g) {
  $("ingest").hidden = !g;
  if (!g) return;
  setText("ingest-sync", "(" + g.sync + ")");
  setText("ingest-acked", fmtInt(g.acked));
  const now = Date.now();
  if (lastAcked !== null && now > lastAckedTime) {
    const rate = (g.acked - lastAcked) * 1000 / (now - lastAckedTime);
    setText("ingest-rate", rate.toFixed(1));
    ingestHistory.push({ t: now, lag: rate });
    while (ingestHistory.length && ingestHistory[0].t < now - WINDOW_MS) ingestHistory.shift();
    drawSeries("ingest-chart", ingestHistory);
  }
  lastAcked = g.acked; lastAckedTime = now;
  setText("sync-p50", (g.sync_p50_seconds * 1000).toFixed(1));
  setText("sync-p99", (g.sync_p99_seconds * 1000).toFixed(1));
  setText("ingest-batch", g.batch_events.count ? (g.batch_events.sum / g.batch_events.count).toFixed(1) : "–");
  setText("ingest-waiting", fmtInt(g.waiting));
  setText("ingest-errors", fmtInt(g.sync_errors));
}
