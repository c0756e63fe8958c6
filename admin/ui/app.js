// orderstore dashboard: polls /v1/status every second and the latest dead
// letters every 5 seconds, and redraws in place (no reload, no build step).
"use strict";

const $ = (id) => document.getElementById(id);
const history = []; // {t, lag}
const WINDOW_MS = 5 * 60 * 1000;
let lastProcessed = null, lastTime = null;
const ingestHistory = []; // {t, lag: events/s}
let lastAcked = null, lastAckedTime = null;
const valHistory = []; // {t, lag: refused events/s}
let lastRejected = null, lastRejectedTime = null, valShown = "";

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

// versionText is a release's tag ("v1.4.0"), or "dev (commit 1a2b3c4d5e6f)"
// for a build from a checkout.
function versionText(b) {
  if (b.version === "dev") {
    return b.commit && b.commit !== "unknown" ? "dev (commit " + b.commit.slice(0, 12) + ")" : "dev";
  }
  return /^v\d/.test(b.version) ? b.version : "v" + b.version;
}

function render(st, sent) {
  badge("status", st.status, st.status === "ready" ? "ok" : st.status === "recovering" ? "warn" : "bad");
  setText("version", versionText(st.build) + " · nats-server " + st.build.nats_server_version);
  setText("durability", "durability: " + st.durability.mode + " — " + st.durability.description +
    (st.store && st.store.encrypted ? " · encrypted at rest (" + st.store.cipher + ")" : " · not encrypted at rest"));
  renderIngest(st.ingest);
  renderValidation(st.validation);
  renderOrders(st.orders);
  rbFromStatus(st.rebuild, sent);
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
    // Since this start the processor may have applied nothing; the ack
    // floor says how far the projection is, across restarts.
    const through = Math.max(p.last_applied_seq || 0, (st.consumer && st.consumer.ack_floor) || 0);
    setText("last-applied", fmtInt(through));
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
    const sent = Date.now();
    const st = await getJSON("/v1/status");
    if (st.error) throw new Error(st.error);
    render(st, sent);
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

// renderValidation shows schema validation at ingest: the schema of each
// event type and whether the fast check takes it (else the first keyword
// that keeps it off: the library alone checks it), the policy for the
// other types, what was refused (per type and reason, most first) and the
// refusal rate. Hidden when validation
// checks nothing. Types, reasons and files are written as text: a type
// is a subject's token, chosen by whoever publishes.
const VAL_ROWS = 10; // refusal rows shown; the rest are summed up below
function renderValidation(v) {
  $("validation").hidden = !v;
  if (!v) { lastRejected = null; return; }
  const schemas = Object.entries(v.schemas || {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  setText("val-summary", "(" + schemas.length + (schemas.length === 1 ? " schema)" : " schemas)"));
  setText("val-unknown", v.unknown_types === "reject" ? "reject" : "accept");
  setText("val-func", v.func ? "set" : "none");
  setText("val-total", fmtInt(v.rejected_total));
  const now = Date.now();
  if (lastRejected !== null && now > lastRejectedTime && v.rejected_total >= lastRejected) {
    const rate = (v.rejected_total - lastRejected) * 1000 / (now - lastRejectedTime);
    setText("val-rate", rate.toFixed(1));
    valHistory.push({ t: now, lag: rate });
    while (valHistory.length && valHistory[0].t < now - WINDOW_MS) valHistory.shift();
    drawSeries("val-chart", valHistory);
  }
  lastRejected = v.rejected_total; lastRejectedTime = now;

  const rows = (v.rejected || []).slice().sort((a, b) => b.events - a.events ||
    (a.type < b.type ? -1 : a.type > b.type ? 1 : 0) || (a.reason < b.reason ? -1 : a.reason > b.reason ? 1 : 0));
  const slow = v.slow || {};
  const shown = JSON.stringify([schemas, rows, slow]);
  if (shown === valShown) return; // unchanged: leave the tables be
  valShown = shown;
  $("val-schemas").replaceChildren(...(schemas.length ? schemas.map(([typ, file]) => {
    const tr = el("tr");
    const check = Object.hasOwn(slow, typ) ? "library alone: " + slow[typ] : "fast";
    tr.append(el("td", "vtype", typ), el("td", "vfile", file), el("td", "vcheck", check));
    return tr;
  }) : [valNote("none", 3)]));
  $("val-rows").replaceChildren(...(rows.length ? rows.slice(0, VAL_ROWS).map((r) => {
    const tr = el("tr");
    tr.append(el("td", "vtype", r.type), el("td", "vreason", r.reason), el("td", "vcount", fmtInt(r.events)));
    return tr;
  }) : [valNote("none", 3)]));
  const rest = rows.slice(VAL_ROWS);
  $("val-more").hidden = !rest.length;
  $("val-more").textContent = rest.length ? "and " + fmtInt(rest.reduce((n, r) => n + r.events, 0)) + " more in " +
    rest.length + " other type/reason pairs (orderstore_validation_rejected_total in /metrics)" : "";
}
function valNote(text, cols) {
  const tr = el("tr"), td = el("td", "muted", text);
  td.colSpan = cols;
  tr.appendChild(td);
  return tr;
}

// ---- An order's page: its state, its events as a timeline with the state
// after each, and its dead letters with a replay button. Opened by the
// search form or a deep link (#order=<id, URI-encoded>). Everything from
// the API is written with textContent: payloads and ids are data, never
// markup.

const PAGE = 50; // events per request
// ORDER_ID is what the server accepts as an order id (processor.ValidOrderID).
const ORDER_ID = /^[-\/_=.a-zA-Z0-9]{1,256}$/;
function validOrderID(id) {
  return ORDER_ID.test(id) && !id.startsWith(".") && !id.endsWith(".") && !id.includes("..");
}
let view = null; // {id, gen, next, lastSeq, loading}
let viewGen = 0;

// api calls the admin API: the session cookie (or no token) authorizes it,
// and a POST carries the JSON Content-Type the server wants from the
// dashboard (a cross-site form cannot send one). opts: {post: true} or
// {method: "POST" | "DELETE", body: a POST's JSON text, "{}" if none}. It
// resolves to {status, body}; a body that is not JSON becomes {error: its
// text}.
async function api(url, opts = {}) {
  const init = { credentials: "same-origin", cache: "no-store", headers: {} };
  const method = opts.method || (opts.post ? "POST" : "GET");
  if (method !== "GET") init.method = method;
  if (method === "POST") {
    init.headers["Content-Type"] = "application/json";
    init.body = opts.body ?? "{}";
  }
  const r = await fetch(url, init);
  if (r.status === 401) { location.reload(); throw new Error("unauthorized"); }
  const text = await r.text();
  let body;
  try { body = JSON.parse(text); } catch (e) { body = { error: text.trim() || "HTTP " + r.status }; }
  if (body === null || typeof body !== "object") body = { error: "HTTP " + r.status };
  return { status: r.status, body };
}

function orderURL(id, tail) { return "/v1/orders/" + encodeURIComponent(id) + (tail || ""); }

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
function fmtTime(t) {
  if (!t) return "–";
  const d = new Date(t);
  return isNaN(d) ? String(t) : d.toISOString().replace("T", " ").replace("Z", " UTC");
}
// payloadText is an event's payload for a <pre>: pretty JSON, or the
// bytes as UTF-8 text when the payload is not JSON.
function payloadText(data, b64) {
  if (data !== undefined) return JSON.stringify(data, null, 2);
  if (b64 === undefined || b64 === null) return "";
  let bytes;
  try { bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)); } catch (e) { return b64; }
  const text = new TextDecoder("utf-8").decode(bytes);
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return text; }
}

function orderError(msg) {
  $("order-error").hidden = !msg;
  $("order-error").textContent = msg || "";
}

// openOrder shows the order id (or a message saying why it cannot).
function openOrder(id) {
  const gen = ++viewGen;
  view = null;
  $("order").hidden = false;
  $("order-title").textContent = id;
  $("order-status").textContent = ""; $("order-status").className = "badge";
  $("order-body").hidden = true;
  delete $("order").dataset.loaded;
  $("order-dlq-msg").hidden = true;
  $("asof-state").hidden = true; $("asof-note").hidden = true;
  if ($("order-id").value !== id) $("order-id").value = id;
  if (!validOrderID(id)) {
    orderError("not an order id: " + JSON.stringify(id) + " (1 to 256 letters, digits, '-', '_', '=', '/', '.')");
    return;
  }
  orderError("");
  view = { id, gen, next: 0, lastSeq: null, loading: false };
  loadOrder(view, true);
}

function closeOrder() {
  viewGen++;
  view = null;
  $("order").hidden = true;
  if (location.hash) window.history.replaceState(null, "", location.pathname + location.search);
}

// loadOrder reads the order's state and dead letters and, on first (or
// when new events arrived and every page is shown), its events.
async function loadOrder(v, first) {
  if (v.loading) { v.again = Math.max(v.again || 0, first ? 2 : 1); return; } // once this load is done
  v.loading = true;
  try {
    const o = await api(orderURL(v.id));
    if (v.gen !== viewGen) return;
    if (o.status !== 200) {
      orderError(o.status === 404 ? "order " + JSON.stringify(v.id) + " not found" : "order: " + (o.body.error || "HTTP " + o.status));
      $("order-body").hidden = true;
      return;
    }
    orderError("");
    renderOrderState(o.body);
    $("order-body").hidden = false;
    if (first) {
      $("timeline").replaceChildren();
      v.next = 0;
      v.lastSeq = o.body.last_seq;
      await loadEvents(v, 0);
    } else if (o.body.last_seq !== v.lastSeq && v.next === null) {
      v.lastSeq = o.body.last_seq;
      await loadEvents(v, v.shown);
    }
    await loadOrderDLQ(v);
    if (v.gen === viewGen) $("order").dataset.loaded = v.id;
  } catch (e) {
    if (v.gen === viewGen) orderError("cannot reach orderstore: " + e.message);
  } finally {
    v.loading = false;
    const again = v.again;
    v.again = 0;
    if (again && v.gen === viewGen) loadOrder(v, again === 2);
  }
}

function renderOrderState(o) {
  badge("order-status", o.status || "–", "");
  const rows = [["status", o.status], ["last event", o.last_event], ["events", fmtInt(o.events)],
    ["sequences", fmtInt(o.first_seq) + " … " + fmtInt(o.last_seq)],
    ["first event", fmtTime(o.first_event_at)], ["last event at", fmtTime(o.last_event_at)], ["updated", fmtTime(o.updated_at)]];
  $("order-state").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", "", k), el("dd", "", v)]));
}

// loadEvents appends the page of events from position from.
async function loadEvents(v, from) {
  $("timeline-more").disabled = true;
  const r = await api(orderURL(v.id, "/events?states=true&limit=" + PAGE + "&from=" + from));
  if (v.gen !== viewGen) return;
  $("timeline-more").disabled = false;
  if (r.status !== 200) {
    orderError("events: " + (r.body.error || "HTTP " + r.status) + (r.body.hint ? " (" + r.body.hint + ")" : ""));
    return;
  }
  const p = r.body;
  const list = $("timeline");
  for (const e of p.events || []) {
    if (list.querySelector('li[data-position="' + Number(e.position) + '"]')) continue; // shown already
    list.appendChild(renderEvent(e));
  }
  v.shown = (p.from || 0) + (p.events || []).length;
  v.next = p.next ?? null;
  $("timeline-more").hidden = v.next === null;
  setText("timeline-count", "(" + fmtInt(list.children.length) + " of " + fmtInt(p.total) + " events" +
    (p.unindexed ? ", " + fmtInt(p.unindexed) + " not indexed yet" : "") + ")");
}

// renderEvent is one event of the timeline: when, what, where in the
// stream, its payload, and the order's state after it.
function renderEvent(e) {
  const li = el("li", "event");
  li.dataset.position = e.position;
  li.dataset.seq = e.seq;
  const head = el("div", "ev-head");
  head.append(el("span", "ev-time", e.retained ? fmtTime(e.time) : "–"), el("span", "ev-type", e.type || ""),
    el("span", "ev-seq", "seq " + (e.seq ? e.seq : "unknown")));
  if (e.edge) head.appendChild(el("span", "ev-edge", "edge " + e.edge));
  if (e.subject) head.appendChild(el("span", "ev-subject muted", e.subject));
  li.appendChild(head);
  if (!e.retained) {
    li.classList.add("gone");
    li.appendChild(el("p", "muted ev-gone", "no longer retained: the stream's retention removed this event"));
  } else {
    if (e.replaced) li.appendChild(el("p", "warn", "replaced: this event was lost in a power cut before it was durable; the stream holds another event at this seq"));
    const body = el("div", "ev-body");
    const pay = el("div", "ev-payload");
    pay.appendChild(el("div", "muted small", e.data !== undefined ? "payload" : "payload (not JSON)"));
    pay.appendChild(el("pre", "json", payloadText(e.data, e.data_base64)));
    if (e.headers && Object.keys(e.headers).length) {
      const d = el("details", "ev-headers");
      d.appendChild(el("summary", "muted small", "headers"));
      d.appendChild(el("pre", "json", Object.entries(e.headers).map(([k, vs]) => vs.map((v) => k + ": " + v).join("\n")).join("\n")));
      pay.appendChild(d);
    }
    body.appendChild(pay);
    body.appendChild(renderStateAfter(e.state));
    li.appendChild(body);
  }
  if (e.retained === false && e.state) li.appendChild(renderStateAfter(e.state));
  return li;
}

function renderStateAfter(s) {
  const box = el("div", "ev-state");
  box.appendChild(el("div", "muted small", "state after"));
  if (!s) { box.appendChild(el("div", "muted", "–")); return box; }
  const line = el("div", "ev-state-line");
  line.append(el("span", "ev-state-status", s.status), el("span", "muted", " · "), el("span", "ev-state-events", s.events + (s.events === 1 ? " event" : " events")));
  box.appendChild(line);
  const d = el("details");
  d.appendChild(el("summary", "muted small", "JSON"));
  d.appendChild(el("pre", "json ev-state-json", JSON.stringify(s, null, 2)));
  box.appendChild(d);
  return box;
}

async function loadOrderDLQ(v) {
  const r = await api(orderURL(v.id, "/dlq"));
  if (v.gen !== viewGen) return;
  const tb = $("order-dlq-rows");
  if (r.status !== 200) {
    setText("order-dlq-note", "");
    tb.replaceChildren(deadLetterNote("cannot read: " + (r.body.error || "HTTP " + r.status)));
    return;
  }
  setText("order-dlq-note", r.body.complete ? "" : "(among the most recent dead letters)");
  const items = r.body.items || [];
  if (!items.length) { tb.replaceChildren(deadLetterNote("none")); return; }
  tb.replaceChildren(...items.map((d) => {
    const tr = el("tr");
    tr.dataset.seq = d.seq;
    tr.append(el("td", "", d.seq), el("td", "", d.subject), el("td", "", d.original_seq));
    const err = el("td", "err", d.error + (d.poison ? " (poison)" : ""));
    err.title = d.error;
    tr.appendChild(err);
    const pay = el("td");
    pay.appendChild(el("pre", "json", payloadText(undefined, d.data)));
    tr.appendChild(pay);
    const act = el("td");
    const b = el("button", "replay", "Replay");
    b.type = "button";
    b.addEventListener("click", () => replay(v, d.seq, b));
    act.appendChild(b);
    tr.appendChild(act);
    return tr;
  }));
}

function deadLetterNote(text) {
  const tr = el("tr"), td = el("td", "muted", text);
  td.colSpan = 6;
  tr.appendChild(td);
  return tr;
}

// replay publishes the dead letter seq again (POST /v1/dlq/{seq}/replay),
// then reloads the order.
async function replay(v, seq, button) {
  button.disabled = true;
  const msg = $("order-dlq-msg");
  try {
    const r = await api("/v1/dlq/" + encodeURIComponent(seq) + "/replay", { post: true });
    if (v.gen !== viewGen) return;
    msg.hidden = false;
    if (r.status === 200) {
      msg.className = "small ok";
      msg.textContent = "dead letter " + seq + " replayed as event seq " + r.body.new_seq;
    } else {
      msg.className = "small error";
      msg.textContent = "replay of dead letter " + seq + " failed: " + (r.body.error || "HTTP " + r.status);
      button.disabled = false;
    }
    await loadOrder(v, false);
  } catch (e) {
    msg.hidden = false; msg.className = "small error";
    msg.textContent = "replay of dead letter " + seq + " failed: " + e.message;
    button.disabled = false;
  }
}

// showAsOf shows the order's state as of a time (RFC 3339) or a stream seq.
async function showAsOf(v, point) {
  const q = /^\d+$/.test(point) ? "as_of_seq=" + point : "as_of=" + encodeURIComponent(point);
  const r = await api(orderURL(v.id, "?" + q));
  if (v.gen !== viewGen) return;
  const note = $("asof-note"), pre = $("asof-state");
  note.hidden = false;
  if (r.status !== 200) {
    note.textContent = r.body.error || "HTTP " + r.status;
    pre.hidden = true;
    return;
  }
  const a = r.body.as_of || {};
  note.textContent = "after " + fmtInt(a.events) + " events, up to seq " + fmtInt(a.last_seq) +
    (a.complete ? "" : " (incomplete" + (a.not_retained ? ": " + fmtInt(a.not_retained) + " no longer retained" : "") + ")");
  pre.hidden = false;
  pre.textContent = JSON.stringify(r.body, null, 2);
}

// orderFromHash is the order id of a #order=<id> link; null for none.
function orderFromHash() {
  const h = location.hash;
  if (!h.startsWith("#order=")) return null;
  try { return decodeURIComponent(h.slice(7)); } catch (e) { return h.slice(7); }
}
function route() {
  const id = orderFromHash();
  if (id === null) { if (!$("order").hidden) { viewGen++; view = null; $("order").hidden = true; } return; }
  openOrder(id);
}

$("order-search").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const id = $("order-id").value.trim();
  if (!id) return;
  const hash = "#order=" + encodeURIComponent(id);
  if (location.hash === hash) openOrder(id); else location.hash = hash; // hashchange opens it
});
$("order-asof").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const p = $("asof-input").value.trim();
  if (view && p) showAsOf(view, p);
});
$("timeline-more").addEventListener("click", () => { if (view && view.next !== null) loadEvents(view, view.next); });
$("order-refresh").addEventListener("click", () => { if (view) loadOrder(view, true); });
$("order-close").addEventListener("click", closeOrder);
window.addEventListener("hashchange", route);
route();
// The open order's state and dead letters follow the stream, as the rest
// of the page does; new events are appended once every page is shown.
setInterval(() => { if (view) loadOrder(view, false); }, 5000);

// ---- The projection rebuild: the one under way or the last one, from
// /v1/status's "rebuild" (polled with the rest of the page): its state,
// progress, what it skipped and, at the end, what it did. "Rebuild
// projection" asks for a confirmation, then starts one (POST
// /v1/projection/rebuild); "Cancel" stops one that folds (DELETE). The
// server's answer, a refusal's text included, is shown in the card; all of
// it is written as text.

let rbLast = null; // the rebuild shown (null: none ran)
let rbBusy = false; // a request of the card is under way
let rbAsk = null; // what the confirm step asks: {body, what}
let rbAnswered = 0; // when the server last answered a request of the card
const RB_BADGE = { folding: "warn", "taking over": "warn", done: "ok", canceled: "", failed: "bad" };

function rbRunning(rb) { return !!rb && (rb.state === "folding" || rb.state === "taking over"); }

// rbFromStatus shows /v1/status's rebuild, unless that status was asked
// before the server answered the card's last request (it would show the
// rebuild as it was before it).
function rbFromStatus(rb, sent) {
  if (sent !== undefined && sent < rbAnswered) return;
  renderRebuild(rb);
}

function renderRebuild(rb) {
  rb = rb || null;
  rbLast = rb;
  const card = $("rebuild");
  card.dataset.state = rb ? rb.state : "";
  card.dataset.id = rb ? rb.id : "";
  $("rb-none").hidden = !!rb;
  $("rb-body").hidden = !rb;
  $("rb-state").hidden = !rb;
  if (rb) {
    badge("rb-state", rb.state, RB_BADGE[rb.state] ?? "");
    $("rb-state").title = "rebuild " + rb.id + (rb.version ? ", projection version " + rb.version : "");
    setText("rb-reason", rb.reason || "–");
    setText("rb-from-seq", rb.from_seq ? fmtInt(rb.from_seq) + (rb.head ? " … " + fmtInt(rb.head) : "") : "–");
    let frac;
    if (rb.state === "taking over") {
      setText("rb-progress-label", "copied");
      setText("rb-progress", fmtInt(rb.copied) + " of " + fmtInt(rb.to_copy) + " orders");
      frac = rb.to_copy ? rb.copied / rb.to_copy : 0;
    } else {
      frac = rb.total ? rb.done / rb.total : rb.state === "done" ? 1 : 0;
      setText("rb-progress-label", "folded");
      setText("rb-progress", fmtInt(rb.done) + " of " + fmtInt(rb.total) + " events" +
        (rb.total ? " (" + Math.floor(100 * Math.min(1, frac)) + "%)" : ""));
    }
    $("rb-bar").style.width = 100 * Math.min(1, Math.max(0, frac || 0)) + "%";
    const folding = rb.state === "folding";
    setText("rb-rate", folding && rb.rate > 0 ? rb.rate.toFixed(1) + " events/s" : "–");
    setText("rb-eta", folding && rb.rate > 0 ? fmtDur(rb.eta_seconds) : "–");
    setText("rb-skipped", fmtInt(rb.poison) + " poison, " + fmtInt(rb.dead_lettered) +
      (rb.dead_lettered === 1 ? " dead letter" : " dead letters"));
    setText("rb-started", fmtTime(rb.started_at));
    const took = rb.ended_at ? (Date.parse(rb.ended_at) - Date.parse(rb.started_at)) / 1000 : NaN;
    setText("rb-ended", rb.ended_at ? fmtTime(rb.ended_at) + (took >= 0 ? " (" + fmtDur(took) + ")" : "") : "–");
    $("rb-summary").hidden = rb.state !== "done";
    setText("rb-rebuilt", fmtInt(rb.rebuilt));
    setText("rb-partial", fmtInt(rb.partial) + (rb.replace_partial ? " (replace partial: rebuilt too)" : ""));
    setText("rb-conflicts", fmtInt(rb.conflicts));
    setText("rb-untouched", fmtInt(rb.untouched));
    $("rb-error").hidden = !rb.error;
    setText("rb-error", rb.error ? "error: " + rb.error : "");
  }
  const running = rbRunning(rb);
  if (running && rbAsk) rbConfirmClose(); // started elsewhere meanwhile
  $("rb-form").hidden = running;
  $("rb-start").disabled = rbBusy || !!rbAsk;
  $("rb-cancel").hidden = !(rb && rb.state === "folding");
  $("rb-cancel").disabled = rbBusy;
}

function rbMessage(text, ok) {
  const m = $("rb-msg");
  m.hidden = !text;
  m.className = "small " + (ok ? "ok" : "error");
  m.textContent = text || "";
}

function rbConfirmClose() {
  rbAsk = null;
  $("rb-confirm").hidden = true;
  $("rb-from").disabled = false;
  $("rb-replace").disabled = false;
  $("rb-start").disabled = rbBusy;
}

// The form asks first: what the rebuild will do, to confirm.
$("rb-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  if (rbBusy || rbAsk || rbRunning(rbLast)) return;
  let from = $("rb-from").value.trim();
  const replace = $("rb-replace").checked;
  const parts = [];
  let what;
  if (/^\d+$/.test(from)) from = from.replace(/^0+(?=\d)/, "");
  if (from === "" || from === "0") {
    what = "from the stream's first event";
  } else if (/^\d+$/.test(from)) {
    parts.push('"from_seq":' + from); // digits only: the JSON number, exact however large
    what = "from stream seq " + from;
  } else if (/^\d{4}-\d\d-\d\dT\d\d:\d\d/.test(from)) {
    parts.push('"from_time":' + JSON.stringify(from));
    what = "from the first event at or after " + from;
  } else {
    rbMessage("from: a stream seq (e.g. 1042) or an RFC 3339 time (e.g. 2026-12-01T00:00:00Z), or nothing for the whole stream", false);
    return;
  }
  if (replace) parts.push('"replace_partial":true');
  rbMessage("");
  rbAsk = { body: "{" + parts.join(",") + "}", what };
  const whole = parts.length === (replace ? 1 : 0); // no from_seq, no from_time
  setText("rb-confirm-text", "Rebuild the projection " + what +
    (whole ? (replace ? ", replacing the state of orders whose earlier events the stream no longer holds" :
      "; orders whose earlier events the stream no longer holds keep their state") :
      (replace ? ", replacing the state of orders with earlier events too" : "; orders with earlier events keep their state")) +
    "? The live projection serves reads meanwhile; the processor pauses briefly while the rebuilt orders are copied in.");
  $("rb-from").disabled = true;
  $("rb-replace").disabled = true;
  $("rb-start").disabled = true;
  $("rb-confirm").hidden = false;
  $("rb-confirm-yes").focus();
});
$("rb-confirm-no").addEventListener("click", rbConfirmClose);
$("rb-confirm-yes").addEventListener("click", rbStart);
$("rb-cancel").addEventListener("click", rbCancel);

// rbStart starts the rebuild the confirm step showed.
async function rbStart() {
  const ask = rbAsk;
  if (!ask || rbBusy) return;
  rbBusy = true;
  rbConfirmClose();
  renderRebuild(rbLast);
  try {
    const r = await api("/v1/projection/rebuild", { method: "POST", body: ask.body });
    rbAnswered = Date.now();
    if (r.status === 202 && r.body.id) {
      rbMessage("rebuild " + r.body.id + " started " + ask.what, true);
      renderRebuild(r.body);
    } else {
      rbMessage("rebuild refused: " + (r.body.error || "no reason given") + " (HTTP " + r.status + ")", false);
    }
  } catch (e) {
    rbMessage("rebuild not started: " + e.message, false);
  } finally {
    rbBusy = false;
    renderRebuild(rbLast);
    tick();
  }
}

// rbCancel asks the rebuild under way to stop (the live projection stays
// as it was).
async function rbCancel() {
  if (rbBusy) return;
  rbBusy = true;
  renderRebuild(rbLast);
  try {
    const r = await api("/v1/projection/rebuild", { method: "DELETE" });
    rbAnswered = Date.now();
    if (r.status === 202) {
      rbMessage("cancel requested: the shadow is dropped and the live projection stays as it was", true);
      if (r.body.id) renderRebuild(r.body);
    } else {
      rbMessage("cancel refused: " + (r.body.error || "no reason given") + " (HTTP " + r.status + ")", false);
    }
  } catch (e) {
    rbMessage("cancel not sent: " + e.message, false);
  } finally {
    rbBusy = false;
    renderRebuild(rbLast);
    tick();
  }
}

// ---- Orders by status: /v1/status's "orders" (the order index) as a table
// of counts, the stale ones (past processor.stale_after) highlighted. A
// status or its stale count lists those orders, oldest first, from GET
// /v1/orders; each links to its timeline (#order=<id>). All written as text.
const LIST_PAGE = 20;
let ordersShown = "";
let olist = null; // {status, stale, next, gen}
let olistGen = 0;
function renderOrders(o) {
  $("orders").hidden = !o;
  if (!o) return;
  setText("orders-total", o.loading ? "" : "(" + fmtInt(o.total) + (o.total === 1 ? " order)" : " orders)"));
  $("orders-loading").hidden = !o.loading;
  if (o.loading) { setText("orders-loading", "loading the order index from the projection: " + fmtInt(o.total) + " orders so far"); return; }
  const shown = JSON.stringify([o.statuses, o.other, o.other_statuses]);
  if (shown === ordersShown) return;
  ordersShown = shown;
  const rows = o.statuses || [];
  $("orders-rows").replaceChildren(...(rows.length ? rows.map((c) => {
    const tr = el("tr");
    const name = el("td", "vtype"), b = el("button", "link", c.status);
    b.type = "button"; b.title = "list the orders in " + c.status;
    b.addEventListener("click", () => openList(c.status, false));
    name.appendChild(b);
    const stale = el("td", "vcount");
    if (c.stale === undefined || c.stale === null) stale.textContent = "–";
    else if (c.stale === 0) stale.textContent = "0";
    else {
      const sb = el("button", "link stale", fmtInt(c.stale));
      sb.type = "button"; sb.title = "list the stale orders in " + c.status + " (" + ((o.stale_after || {})[c.status] || "") + " without an event)";
      sb.addEventListener("click", () => openList(c.status, true));
      stale.appendChild(sb);
      tr.className = "stale";
    }
    tr.append(name, el("td", "vcount", fmtInt(c.orders)), stale);
    return tr;
  }) : [valNote("none", 3)]));
  $("orders-more").hidden = !o.other_statuses;
  $("orders-more").textContent = o.other_statuses ? "and " + fmtInt(o.other) + " orders in " + fmtInt(o.other_statuses) + " other statuses" : "";
}
function openList(status, stale) {
  olist = { status, stale, next: "", gen: ++olistGen };
  setText("orders-list-title", (stale ? "Stale orders in " : "Orders in ") + status + ", oldest first");
  $("orders-list-rows").replaceChildren();
  $("orders-list-msg").hidden = true;
  $("orders-list").hidden = false;
  loadList(olist);
}
async function loadList(v) {
  const q = new URLSearchParams({ status: v.status, limit: String(LIST_PAGE) });
  if (v.stale) q.set("stale", "true");
  if (v.next) q.set("cursor", v.next);
  $("orders-list-more").hidden = true;
  let r;
  try { r = await api("/v1/orders?" + q.toString()); } catch (e) { r = { status: 0, body: { error: e.message } }; }
  if (v.gen !== olistGen) return; // another list was opened meanwhile
  const msg = $("orders-list-msg");
  if (r.status !== 200) {
    // Shown, with "load more" to try again (a 503 while the index loads).
    msg.hidden = false; msg.className = "small error"; msg.textContent = r.body.error || "HTTP " + r.status;
    $("orders-list-more").hidden = false;
    return;
  }
  const now = Date.now();
  $("orders-list-rows").append(...(r.body.orders || []).map((o) => {
    const tr = el("tr", o.stale ? "stale" : "");
    const id = el("td"), a = el("a", o.stale ? "stale" : "", o.order_id);
    a.href = "#order=" + encodeURIComponent(o.order_id);
    id.appendChild(a);
    const t = o.last_event_at ? Date.parse(o.last_event_at) : NaN;
    tr.append(id, el("td", "", fmtTime(o.last_event_at)), el("td", "", isNaN(t) ? "–" : fmtDur(Math.max(0, (now - t) / 1000))));
    return tr;
  }));
  v.next = r.body.next || "";
  $("orders-list-more").hidden = !v.next;
  const n = $("orders-list-rows").children.length;
  msg.hidden = n !== 0; msg.className = "small muted"; msg.textContent = n ? "" : "none now";
}
$("orders-list-more").addEventListener("click", () => { if (olist) loadList(olist); });
$("orders-list-close").addEventListener("click", () => { olistGen++; olist = null; $("orders-list").hidden = true; });
