// dlsched dashboard: plain JS, no build step, no network beyond this service.
// Pages (hash routes): #/ cluster + queue + timeline, #/job/ID loss curve + fit, #/reports policy comparison.
// Each page makes ONE request to /dashboard/api/* and lays the answer out as HTML tables and inline SVG.
"use strict";

const params = new URLSearchParams(location.search);
// #token=T: a fragment never leaves the browser (a query's ?token=T, still taken, reached the server's request line,
// so a reverse proxy's access log)
const hashToken = location.hash.match(/^#token=([^&#]+)/);
const given = hashToken ? decodeURIComponent(hashToken[1]) : params.get("token");
if (given) {
  sessionStorage.setItem("dlsched-token", given);
  // out of the address bar, the browser's history and the Referer of the page's requests from here on
  params.delete("token");
  history.replaceState(null, "", location.pathname + (params.toString() ? `?${params}` : "") + (hashToken ? "#/" : location.hash));
}
const TOKEN = sessionStorage.getItem("dlsched-token");
const REFRESH_MS = 3000;
const SVGNS = "http://www.w3.org/2000/svg";
let timer = null;

// ---------------------------------------------------------------- helpers
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const fmtNum = (x, d = 3) => (x == null ? "–" : Math.abs(x) >= 1000 ? Math.round(x).toLocaleString() : Number(x).toPrecision(d));
function fmtDur(s) {
  if (s == null) return "?";
  const a = Math.abs(s), sign = s < 0 ? "-" : "";
  if (a < 60) return sign + Math.round(a) + "s";
  if (a < 3600) return sign + Math.floor(a / 60) + "m" + String(Math.round(a % 60)).padStart(2, "0") + "s";
  return sign + Math.floor(a / 3600) + "h" + String(Math.round((a % 3600) / 60)).padStart(2, "0") + "m";
}
const fmtClock = (t) => (t == null ? "?" : new Date(t * 1000).toLocaleTimeString([], { hour12: false }));
const rel = (t, now) => (t == null ? "?" : `${fmtClock(t)} <span class="muted">(${t >= now ? "in " : ""}${fmtDur(Math.abs(t - now))}${t < now ? " ago" : ""})</span>`);
// a live job that trained its whole budget is saving its last checkpoint and exiting: its predicted finish just
// passed, and "(3s ago)" read as a job overdue (`dlsched status` says LEFT ending)
const finishCell = (t, j, now) => (j.fraction_done >= 1 && ["running", "rescaling"].includes(j.state)
  ? `ending <span class="muted">(trained its budget)</span>` : rel(t, now));
// the detail fields that are POSIX times: dlsched.display.TIME_FIELDS (tests/service/test_dashboard.py keeps them equal)
const TIME_FIELDS = new Set(["time", "submit_time", "start_time", "end_time", "predicted_start", "predicted_finish",
  "made_at", "last_seen", "since", "target_time", "forecast_time", "stalled_since", "policy_finish", "target_time_80",
  "time_80", "predicted_finish_range"]);
// an event's detail as "key=value" pairs: times as clock times, fractions to 4 digits (the API keeps full values)
function fmtDetail(detail) {
  const value = (k, v) => (typeof v === "number" && TIME_FIELDS.has(k) ? fmtClock(v)
    : Array.isArray(v) && TIME_FIELDS.has(k) ? v.map(fmtClock).join("–")
    : typeof v === "number" && !Number.isInteger(v) ? String(Number(v.toPrecision(4)))
    : v !== null && typeof v === "object" ? JSON.stringify(v) : String(v));
  return Object.entries(detail || {}).map(([k, v]) => `${k}=${value(k, v)}`).join(", ");
}
function colour(id) { const h = (Number(id) * 137.508) % 360; return `hsl(${h.toFixed(0)} 62% 48%)`; }

async function api(path) {
  const r = await fetch(path, { headers: TOKEN ? { Authorization: "Bearer " + TOKEN } : {} });
  // opened as the URL serve prints, without ?token=: say how to open it (a bare "HTTP 401" said nothing)
  if (r.status === 401) throw new Error(`${path}: HTTP 401: ${TOKEN ? "the token given is not the service's" : "this page needs the service's token"}: open ${location.pathname}#token=TOKEN, TOKEN being what the token file named by \`dlsched serve\` at its start holds (STATE_DIR/token)`);
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status} ${(await r.text()).slice(0, 200)}`);
  return r.json();
}

function el(tag, attrs = {}, parent = null) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
function svgText(parent, x, y, s, attrs = {}) { const t = el("text", { x, y, ...attrs }, parent); t.textContent = s; return t; }
function ticks(lo, hi, n = 5) {
  const span = hi - lo || 1, step0 = span / n, mag = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => span / s <= n) || step0;
  const out = []; for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}

// ---------------------------------------------------------------- charts
// Line/scatter chart: series = [{points: [[x, y]], colour, kind: "dots"|"line", label, width?, dash?}]
function lineChart(series, { width = 760, height = 300, xLabel = "", yLabel = "" } = {}) {
  const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  const m = { l: 56, r: 16, t: 14, b: 40 };
  const pts = series.flatMap((s) => s.points).filter((p) => Number.isFinite(p[0]) && Number.isFinite(p[1]));
  if (!pts.length) { svgText(svg, 20, 30, "no data yet"); return svg; }
  let [x0, x1] = [Math.min(...pts.map((p) => p[0])), Math.max(...pts.map((p) => p[0]))];
  let [y0, y1] = [Math.min(0, ...pts.map((p) => p[1])), Math.max(...pts.map((p) => p[1]))];
  if (x1 === x0) x1 = x0 + 1; if (y1 === y0) y1 = y0 + 1;
  const X = (x) => m.l + ((x - x0) / (x1 - x0)) * (width - m.l - m.r);
  const Y = (y) => height - m.b - ((y - y0) / (y1 - y0)) * (height - m.t - m.b);
  const ax = el("g", { class: "axis" }, svg);
  el("line", { x1: m.l, y1: height - m.b, x2: width - m.r, y2: height - m.b }, ax);
  el("line", { x1: m.l, y1: m.t, x2: m.l, y2: height - m.b }, ax);
  for (const v of ticks(x0, x1)) { el("line", { x1: X(v), x2: X(v), y1: height - m.b, y2: height - m.b + 4 }, ax); svgText(ax, X(v), height - m.b + 16, fmtNum(v), { "text-anchor": "middle" }); }
  for (const v of ticks(y0, y1)) { el("line", { x1: m.l - 4, x2: m.l, y1: Y(v), y2: Y(v) }, ax); svgText(ax, m.l - 6, Y(v) + 4, fmtNum(v), { "text-anchor": "end" }); }
  svgText(svg, (m.l + width - m.r) / 2, height - 6, xLabel, { "text-anchor": "middle" });
  svgText(svg, 12, m.t + (height - m.t - m.b) / 2, yLabel, { transform: `rotate(-90 12 ${m.t + (height - m.t - m.b) / 2})`, "text-anchor": "middle" });
  // the legend goes in the right-hand corner the data leave emptier (a rising accuracy fills the top, a loss the bottom)
  // as wide as its longest label (about 6.5 px a character at the page's font), so that none runs off the chart
  const legendW = Math.max(250, 24 + 6.5 * Math.max(...series.map((s) => s.label.length)));
  const legendH = series.length * 16, inBox = (top) => pts.filter((p) => X(p[0]) >= width - m.r - legendW
    && Y(p[1]) >= top && Y(p[1]) <= top + legendH).length;
  const legendTop = inBox(m.t) <= inBox(height - m.b - legendH - 4) ? m.t : height - m.b - legendH - 4;
  series.forEach((s, i) => {
    const g = el("g", { class: "series", "data-label": s.label }, svg);
    if (s.kind === "line") {
      el("path", { d: s.points.map((p, j) => `${j ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(""), fill: "none", stroke: s.colour, "stroke-width": s.width || 2, "stroke-dasharray": s.dash || "" }, g);
    } else {
      for (const p of s.points) el("circle", { cx: X(p[0]).toFixed(1), cy: Y(p[1]).toFixed(1), r: 2.5, fill: s.colour }, g);
    }
    el("rect", { x: width - m.r - legendW, y: legendTop + i * 16, width: 10, height: 10, fill: s.colour }, svg);
    svgText(svg, width - m.r - legendW + 15, legendTop + i * 16 + 9, s.label);
  });
  return svg;
}

// Gantt: intervals [{job_id, name, start, end, gpus}] -> one row per job, bar height ~ GPUs.
function gantt(intervals, now) {
  const jobs = [...new Set(intervals.map((i) => i.job_id))].sort((a, b) => a - b);
  const row = 18, m = { l: 130, r: 16, t: 8, b: 28 }, width = 1100;
  const height = m.t + m.b + Math.max(1, jobs.length) * row;
  const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`, id: "gantt-svg" });
  if (!intervals.length) { svgText(svg, 10, 20, "no allocations yet"); return svg; }
  const t0 = Math.min(...intervals.map((i) => i.start)), t1 = Math.max(now, ...intervals.map((i) => i.end));
  const maxG = Math.max(...intervals.map((i) => i.gpus));
  const X = (t) => m.l + ((t - t0) / (t1 - t0 || 1)) * (width - m.l - m.r);
  const ax = el("g", { class: "axis" }, svg);
  el("line", { x1: m.l, x2: width - m.r, y1: height - m.b, y2: height - m.b }, ax);
  for (const v of ticks(0, t1 - t0, 8)) svgText(ax, X(t0 + v), height - m.b + 14, "+" + fmtDur(v), { "text-anchor": "middle" });
  jobs.forEach((id, r) => {
    const y = m.t + r * row, name = intervals.find((i) => i.job_id === id).name;
    const a = el("a", { href: `#/job/${id}` }, svg);
    svgText(a, m.l - 6, y + row * 0.7, `${id} ${name}`.slice(0, 20), { "text-anchor": "end" });
  });
  const idx = new Map(jobs.map((id, r) => [id, r]));
  for (const iv of intervals) {
    const r = idx.get(iv.job_id), h = 4 + (row - 6) * (iv.gpus / maxG), y = m.t + r * row + (row - h) / 2;
    const rect = el("rect", { x: X(iv.start).toFixed(1), y: y.toFixed(1), width: Math.max(1, X(iv.end) - X(iv.start)).toFixed(1), height: h.toFixed(1), fill: colour(iv.job_id), rx: 2, class: "alloc", "data-job": iv.job_id }, svg);
    const t = el("title", {}, rect);
    t.textContent = `job ${iv.job_id} ${iv.name}: ${iv.gpus} GPU ${JSON.stringify(iv.placement)} ${fmtDur(iv.end - iv.start)}`;
  }
  return svg;
}

// Grouped bars: one small chart per metric, a bar per policy (lower is better for times).
function barChart(rows, metric, higherIsBetter = false) {
  const width = 320, height = 180, m = { l: 56, r: 10, t: 20, b: 42 };
  const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "bars", "data-metric": metric });
  svgText(svg, m.l, 13, metric, { "font-weight": 600 });
  const vals = rows.map((r) => r[metric]).filter(Number.isFinite);
  const y1 = Math.max(...vals, 0) || 1, bw = (width - m.l - m.r) / rows.length;
  const Y = (v) => height - m.b - (v / y1) * (height - m.t - m.b);
  for (const v of ticks(0, y1, 4)) svgText(svg, m.l - 4, Y(v) + 4, fmtNum(v), { "text-anchor": "end" });
  const best = higherIsBetter ? Math.max(...vals) : Math.min(...vals);
  rows.forEach((r, i) => {
    const v = r[metric]; if (!Number.isFinite(v)) return;
    const rect = el("rect", { x: m.l + i * bw + 4, y: Y(v), width: bw - 8, height: height - m.b - Y(v), fill: v === best ? "#16a34a" : "#60a5fa" }, svg);
    el("title", {}, rect).textContent = `${r.policy}: ${v}`;
    svgText(svg, m.l + i * bw + bw / 2, height - m.b + 14, r.policy.slice(0, 12), { "text-anchor": "middle" });
  });
  return svg;
}

// ---------------------------------------------------------------- pages
async function overviewPage(view) {
  const d = await api("/dashboard/api/overview");
  const now = d.now, counts = Object.entries(d.counts).map(([k, v]) => `<span><b>${v}</b> ${esc(k)}</span>`).join("");
  const nodes = d.nodes.map((n) => {
    const cells = [];
    for (const h of n.holders) for (let g = 0; g < h.gpus; g++) cells.push(`<a class="gpu" href="#/job/${h.job_id}" title="job ${h.job_id} ${esc(h.name)}" style="background:${colour(h.job_id)}">${h.job_id}</a>`);
    while (cells.length < n.gpus) cells.push(`<span class="gpu free" title="free">free</span>`);
    const mark = n.lost ? ` <span class="lost-mark" title="the backend lost this node">LOST</span>` : "";
    return `<div class="node${n.lost ? " lost" : ""}" data-node="${esc(n.name)}"><span class="label">${esc(n.name)}${mark} <span class="muted">${esc(n.gpu_type)}</span></span><div class="gpus">${cells.join("")}</div></div>`;
  }).join("");
  const used = d.nodes.reduce((s, n) => s + n.holders.reduce((a, h) => a + h.gpus, 0), 0), total = d.nodes.reduce((s, n) => s + n.gpus, 0);
  // a job alive without progress past stall_after_s (service/stalls.py) says so beside its state
  const stalled = (j) => (j.stalled_since ? ` <span class="error stalled" title="no progress since ${fmtClock(j.stalled_since)}">stalled</span>` : "")
    // a queued job whose start failed with its GPUs free (its folder's disk full): what it waits for (not GPUs)
    + (j.state === "queued" && j.waiting_for ? ` <span class="error waiting">waiting for ${esc(j.waiting_for)}</span>` : "");
  // held (-> the target while it rescales), then what it asked for: "2/1" read as a fraction, with no label
  const gpusCell = (j) => {
    const [lo, hi] = j.gpu_range, asked = lo === hi ? `${lo}` : `${lo}–${hi}`;
    return `${j.gpus}${j.target_gpus != null ? ` → ${j.target_gpus}` : ""} <span class="muted asked" title="asked for ${asked} GPUs${lo === hi ? "" : ` (elastic; ${j.requested} to start)`}">of ${asked}</span>`;
  };
  const q = d.queue.map((j) => `<tr data-job="${j.id}"><td><a href="#/job/${j.id}">${j.id}</a></td><td>${esc(j.name)}</td><td><span class="state ${j.state}">${j.state}</span>${stalled(j)}</td>
      <td class="num">${gpusCell(j)}</td><td class="num">${j.batch_size ?? "–"}</td>
      <td>${j.fraction_done == null ? "–" : `<span class="bar"><i style="width:${(100 * Math.min(1, j.fraction_done)).toFixed(1)}%"></i></span> ${(100 * j.fraction_done).toFixed(0)}%`}</td>
      <td class="num"${j.ensemble ? ' title="the lowest newest loss of its members"' : ""}>${j.ensemble && j.loss != null ? "best " : ""}${fmtNum(j.loss)}</td><td class="num">${fmtNum(j.samples_per_s)}</td>
      <td>${rel(j.predicted_start, now)}</td><td>${finishCell(j.predicted_finish, j, now)}</td><td class="target">${targetCell(j.target, now, j.target_pending)}</td></tr>`).join("");
  const recent = d.recent.map((j) => `<tr><td><a href="#/job/${j.id}">${j.id}</a></td><td>${esc(j.name)}</td><td><span class="state ${j.state}">${j.state}</span></td>
      <td>${fmtClock(j.submit_time)}</td><td>${fmtClock(j.end_time)}</td><td class="num">${j.start_time && j.end_time ? fmtDur(j.end_time - j.submit_time) : "–"}</td><td class="error">${esc(j.error || "")}</td></tr>`).join("");
  view.innerHTML = `
    <section><div class="counts" id="counts"><span><b>${d.total_jobs}</b> jobs</span>${counts}<span><b>${used}/${total}</b> GPUs busy</span></div></section>
    <section id="cluster"><h2>Cluster — nodes × GPUs, who holds what</h2>${nodes || '<p class="muted">no nodes</p>'}</section>
    <section><h2>Queue <span class="muted">(${d.queue.length} active; predicted start/finish under the policy forecast)</span></h2>
      <div class="scroll"><table id="queue"><thead><tr><th>id</th><th>name</th><th>state</th><th class="num" title="the GPUs it trains on, of those it asked for">GPUs held</th><th class="num">batch</th><th>progress</th><th class="num">loss</th><th class="num">samples/s</th><th>predicted start</th><th>predicted finish</th><th>stated target</th></tr></thead><tbody>${q}</tbody></table></div></section>
    <section><h2>Allocation timeline <span class="muted">(${d.gantt_jobs} of ${d.gantt_total_jobs} jobs; bar height ∝ GPUs)</span></h2><div id="gantt" class="scroll"></div></section>
    <section><h2>Recently ended</h2><div class="scroll"><table id="recent"><thead><tr><th>id</th><th>name</th><th>state</th><th>submitted</th><th>ended</th><th class="num">JCT</th><th>error</th></tr></thead><tbody>${recent}</tbody></table></div></section>`;
  document.getElementById("gantt").appendChild(gantt(d.gantt, now));
  return true;
}

async function jobPage(view, id) {
  const d = await api(`/dashboard/api/jobs/${encodeURIComponent(id)}`);
  const j = d.job, now = Date.now() / 1000, fit = d.fit;
  const noise = d.curve.filter((c) => c.noise_scale != null).map((c) => [c.step, c.noise_scale]);
  const series = [{ label: "measured loss", kind: "dots", colour: "#2563eb", points: d.curve.map((c) => [c.step, c.loss]) }];
  if (fit && fit.curve) {
    series.push({ label: `fitted ${fit.model} curve + prediction to the budget`, kind: "line", colour: "#dc2626", points: fit.curve });
  } else if (fit && fit.beta) {
    const last = Math.max(...d.curve.map((c) => c.step)), [b0, b1, b2] = fit.beta;
    const end = last * 1.6 + 1;
    let pts = fit.optimus_steps;   // drawn by the service where the batch changed: its terms are not per step
    if (!pts) {
      pts = [];
      for (let i = 0; i <= 120; i++) { const k = (end * i) / 120; pts.push([k, fit.scale * (1 / (b0 * k + b1) + b2)]); }
    }
    series.push({ label: "fitted Optimus curve 1/(β0·k+β1)+β2", kind: "line", colour: "#dc2626", points: pts });
  }
  const kv = [["state", `<span class="state ${j.state}">${j.state}</span>`], [j.spec.command ? "command" : "entry", esc(j.spec.command ? j.spec.command.join(" ") : j.spec.entry)], ["GPUs held / requested", `${j.num_gpus} / ${j.spec.gpus}`],
    ["placement", esc(JSON.stringify(j.placement))], ["batch size", j.batch_size ?? j.trained_batch ?? "–"], ["samples done", fmtNum(j.samples)],
    ["fraction done", j.fraction_done == null ? "–" : (100 * j.fraction_done).toFixed(1) + "%"], ["submitted", rel(j.submit_time, now)],
    ["started", rel(j.start_time, now)], ["ended", j.end_time ? rel(j.end_time, now) : "–"],
    // an ended job has no prediction to give: "?" read as one the service failed to make (its start and end are above)
    ...(["finished", "failed", "cancelled"].includes(j.state) ? [["predicted start", "–"], ["predicted finish", "–"]]
      : [["predicted start", rel(d.predicted_start, now)], ["predicted finish", finishCell(d.predicted_finish, j, now)]]),
    ["convergence fit", fitText(fit)],
    ["error", `<span class="error">${esc(j.error || "")}</span>`]];
  if (j.stalled_since) kv.splice(1, 0, ["stalled", `<span class="error">no progress since ${rel(j.stalled_since, now)}; its processes live</span>`]);
  if (j.state === "queued" && j.waiting_for) kv.splice(1, 0, ["waiting for", `<span class="error">${esc(j.waiting_for)}</span>`]);
  const allocs = d.allocations.map((a) => `<tr><td>${fmtClock(a.time)}</td><td class="num">${a.num_gpus}</td><td class="num">${a.batch_size ?? "–"}</td><td>${esc(JSON.stringify(a.placement))}</td></tr>`).join("");
  const events = d.events.map((e) => `<tr><td>${fmtClock(e.time)}</td><td>${esc(e.kind)}</td><td>${esc(fmtDetail(e.detail))}</td></tr>`).join("");
  view.innerHTML = `<section><h2 id="job-title">Job ${j.id} — ${esc(j.name)}</h2><table class="kv">${kv.map(([k, v]) => `<tr><td>${k}</td><td>${v}</td></tr>`).join("")}</table></section>
    ${ensembleSection(d.ensemble)}
    <section><h2>Loss curve and fitted convergence curve</h2><div id="loss-chart"></div></section>
    ${d.target ? `<section><h2>Target: ${esc(d.target.metric)} ${esc(String(d.target.value))}</h2><div id="target-chart"></div></section>` : ""}
    <section><h2>Gradient noise scale</h2><div id="noise-chart">${noise.length ? "" : '<p class="muted">none reported (a dlsched.torch job reports it; without it the goodput policy uses throughput)</p>'}</div></section>
    <div class="grid"><section><h2>Allocations</h2><div class="scroll"><table id="allocations"><thead><tr><th>time</th><th class="num">GPUs</th><th class="num">batch</th><th>placement</th></tr></thead><tbody>${allocs}</tbody></table></div></section>
    <section><h2>Events</h2><div class="scroll"><table id="events"><thead><tr><th>time</th><th>kind</th><th>detail</th></tr></thead><tbody>${events}</tbody></table></div></section></div>`;
  document.getElementById("loss-chart").appendChild(lineChart(series, { xLabel: "step", yLabel: "loss" }));
  if (d.target) document.getElementById("target-chart").appendChild(targetChart(d.target, fit && fit.metric_target));
  if (noise.length) document.getElementById("noise-chart").appendChild(lineChart([{ label: "reported tr(Σ)/|G|² (samples)", kind: "line", colour: "#059669", points: noise }], { xLabel: "step", yLabel: "noise scale" }));
  return !["finished", "failed", "cancelled"].includes(j.state);
}

// a stated target's metric as reported, its predicted curve to the budget (service.metric_target), the target's level
// (as the user stated it)
function targetChart(t, predicted) {
  const series = [{ label: `reported ${t.metric}`, kind: "dots", colour: "#2563eb", points: t.points }];
  if (predicted && predicted.curve) series.push({ label: `predicted ${t.metric} to the budget`, kind: "line", colour: "#dc2626", points: predicted.curve });
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  if (xs.length) series.push({ label: `target ${t.value}`, kind: "line", colour: "#059669", dash: "6 4", points: [[Math.min(...xs), t.value], [Math.max(...xs), t.value]] });
  // where the run gets there: the 80 % band of the step, on the target's level (none once reached, or only at the budget)
  const band = predicted && predicted.target_step_80;
  if (band) series.push({ label: "80 % band of when it gets there", kind: "line", colour: "#f59e0b", width: 8, points: [[band[0], t.value], [band[1], t.value]] });
  return lineChart(series, { xLabel: "step", yLabel: t.metric });
}

// the row describes the curve drawn: the schedule-aware prediction to the budget when the job has one, else Optimus
function fitText(fit) {
  if (!fit) return "not enough points";
  if (!fit.curve && !fit.beta) return `no loss fit${targetText(fit)}`;   // a job that reports only its target's metric
  // the Optimus fit is of the loss normalised by ``scale`` (perf.convergence): its RMSE times scale is in loss units
  if (!fit.curve) return `Optimus β = (${fit.beta.map((b) => b.toExponential(3)).join(", ")}), RMSE ${(fit.rmse * fit.scale).toPrecision(3)} (loss units; fitted by the service's online refit)`;
  const band = fit.final_80 ? ` (80 %: ${fmtNum(fit.final_80[0])}–${fmtNum(fit.final_80[1])})` : "";
  const shape = fit.alpha == null ? "" : `, α ${fmtNum(fit.alpha)}, drop ${fmtNum(fit.drop)}`;
  // before the job's first loss, or from one: where its task's finished runs went under its schedule (no RMSE yet)
  const basis = fit.bands === "task_runs" ? " (its task's finished runs, carried to its schedule)" : fit.curve_rmse == null ? "" : `; RMSE ${fmtNum(fit.curve_rmse)} on the points it covers (loss units)`;
  const lr = fit.lr ? `; LR ${esc(fit.lr)}` : "";   // the schedule it assumed, and where that comes from
  return `${esc(fit.model)}: final ${fmtNum(fit.final)}${band} at the budget${shape}${basis}${lr}${targetText(fit)}`;
}

// the job's target_loss (spec prediction or param) and its target of a reported metric: the step the fit reaches
// each at, when at today's rate, and the chance it does by the budget (a target inside the 80 % band but past the
// point prediction: "at the budget")
function targetText(fit) {
  const m = fit.metric_target, none = fit.metric_target_missing;   // none: why this refit could not predict it
  return (fit.target_loss == null ? "" : reachText("target loss", fit.target_loss, fit))
    + (m ? reachText(`target ${esc(m.metric)}`, m.target, m) + ` (${esc(m.metric)} predicted ${fmtNum(m.final, 4)} at the budget, 80 %: ${fmtNum(m.final_80[0], 4)}–${fmtNum(m.final_80[1], 4)})` : "")
    + (none ? `; target ${esc(none.metric)} ${fmtNum(none.target)}: no prediction this refit (${esc(none.why)})` : "");
}
// a live job's stated target in the queue (service.finish_times.stated_target), as `dlsched status`'s TARGET says it
// [early, late]: the 80 % band of when a target is reached, as clock times, else as steps
const timeBand = (b) => (b == null ? "" : ` [${fmtClock(b[0])}–${fmtClock(b[1])}]`);
const stepBand = (b) => (b == null ? "" : ` [${Math.round(b[0]).toLocaleString()}–${Math.round(b[1]).toLocaleString()}]`);
// a stated target of a reported metric with no prediction yet (pending: service.finish_times.stated_targets): says
// so, with why in its tooltip, beside a target loss that has one
function targetCell(t, now, pending) {
  const waiting = pending ? `<span title="${esc(pending.why ?? "no refit yet")}">${esc(pending.metric)} ${pending.value}: no prediction yet</span>` : "";
  if (!t) return waiting || "–";
  return reachCell(t, now) + (waiting ? `; ${waiting}` : "");
}
function reachCell(t, now) {
  if (t.reached) return `${esc(t.metric)} ${t.value}: reached ${t.time != null ? rel(t.time, now) : `step ${Math.round(t.step).toLocaleString()}`}`;
  let when = t.step == null ? "not by the budget" : t.time != null ? rel(t.time, now) + timeBand(t.time_80)
    : `step ${Math.round(t.step).toLocaleString()}${stepBand(t.step_80)}`;
  // past the predicted final value: the time is the budget's, not a prediction of when (as `dlsched status` says it)
  if (t.beyond) when = `predicted to end at ${fmtNum(t.final, 4)}; by the budget, ${when}, only if it does better`;
  return `${esc(t.metric)} ${t.value}: ${when}${t.chance == null ? "" : `, chance ${Math.round(100 * t.chance)} %`}`;
}

function reachText(label, value, t) {
  if (t.target_step == null) return `; ${label} ${fmtNum(value)} not reached by the budget`;
  const when = t.target_time == null ? "" : ` ≈ ${rel(t.target_time, Date.now() / 1000)}`;
  const band = t.target_time_80 != null ? timeBand(t.target_time_80) : stepBand(t.target_step_80);   // 80 %
  const chance = t.target_chance == null ? "" : `, chance ${Math.round(100 * t.target_chance)} % by the budget`;
  const at = `step ${Math.round(t.target_step).toLocaleString()}${when}${band}`;
  if (t.target_beyond_final) return `; ${label} ${fmtNum(value)} past the predicted final value: at the budget, ${at}, only if the run does better${chance}`;
  return `; ${label} ${fmtNum(value)} at ${at}${chance}`;
}

function ensembleSection(ens) {
  if (!ens) return "";
  // a member that left: its epochs, best validation accuracy and weights file (the page showed its state only)
  const members = Object.entries(ens.members).map(([m, st]) => {
    const r = (ens.results || {})[m] || {};
    // every value here is from the job's own progress events (job code writes them): escaped, numbers included
    return `<tr><td>${esc(m)}</td><td>${esc(st)}</td><td class="num">${esc(r.epochs ?? "–")}</td>`
      + `<td class="num">${r.best_acc == null ? "–" : fmtNum(r.best_acc, 4)}</td><td>${esc(r.best_checkpoint ?? "–")}</td></tr>`;
  }).join("");
  const flot = ens.flotillas.map((f, i) => `<li>flotilla ${i + 1}: ${Object.entries(f.members).map(([m, g]) => `${esc(m)} × ${esc(g)}`).join(", ")}</li>`).join("");
  return `<section id="ensemble"><h2>Ensemble <span class="muted">(share ${esc(ens.share ?? "–")} slots)</span></h2>
    <div class="grid"><div><table id="members"><thead><tr><th>member</th><th>state</th><th class="num">epochs</th><th class="num">best val acc</th><th>best weights</th></tr></thead><tbody>${members}</tbody></table></div>
    <div><ul id="flotillas">${flot || '<li class="muted">no flotilla running</li>'}</ul></div></div></section>`;
}

async function reportsPage(view) {
  const d = await api("/dashboard/api/reports");
  if (!d.reports.length) {
    view.innerHTML = `<section id="reports"><h2>Policy comparison</h2><p class="muted">No reports yet. Run <code>dlsched simulate -w TRACE.csv -p fifo -p goodput --report ${esc(d.dir || "REPORTS_DIR")}/NAME</code>; every CSV with a <code>policy</code> column appears here.</p></section>`;
    return false;
  }
  view.innerHTML = `<div id="reports"></div>`;
  const root = document.getElementById("reports");
  for (const r of d.reports) {
    const s = document.createElement("section");
    s.className = "report";
    if (r.error) { s.innerHTML = `<h2>${esc(r.file)}</h2><p class="error">${esc(r.error)}</p>`; root.appendChild(s); continue; }
    const head = `<tr><th>policy</th>${r.metrics.map((m) => `<th class="num">${esc(m)}</th>`).join("")}</tr>`;
    const body = r.rows.map((row) => `<tr><td>${esc(row.policy)}</td>${r.metrics.map((m) => `<td class="num">${fmtNum(row[m], 4)}</td>`).join("")}</tr>`).join("");
    s.innerHTML = `<h2>${esc(r.file)}</h2><div class="scroll"><table>${head}${body}</table></div><p class="muted">best bar in green (lowest, or highest for utilisation / finished)</p><div class="grid charts"></div>`;
    const grid = s.querySelector(".charts");
    for (const m of r.metrics) grid.appendChild(barChart(r.rows, m, r.higher_is_better.includes(m)));
    for (const img of r.images) {        // fetched with the token, shown from a blob URL
      const blob = await (await fetch(`/dashboard/api/reports/image/${img.split("/").map(encodeURIComponent).join("/")}`,
        { headers: TOKEN ? { Authorization: "Bearer " + TOKEN } : {} })).blob();
      const fig = document.createElement("img");
      fig.className = "report-image"; fig.alt = img; fig.src = URL.createObjectURL(blob);
      s.appendChild(fig);
    }
    root.appendChild(s);
  }
  return false;
}

// ---------------------------------------------------------------- router
async function render() {
  clearTimeout(timer);
  const view = document.getElementById("view"), status = document.getElementById("status");
  const hash = location.hash || "#/";
  let live = false;
  try {
    const m = hash.match(/^#\/job\/(\d+)/);
    live = m ? await jobPage(view, m[1]) : hash.startsWith("#/reports") ? await reportsPage(view) : await overviewPage(view);
    status.textContent = "updated " + new Date().toLocaleTimeString([], { hour12: false });
  } catch (e) {
    view.innerHTML = `<section><p class="error" id="load-error">${esc(e.message)}</p></section>`;
  }
  if (!document.body.dataset.loadedMs) document.body.dataset.loadedMs = performance.now().toFixed(1);
  document.body.dataset.rendered = hash;
  if (live && !document.hidden) timer = setTimeout(render, REFRESH_MS);
}
window.addEventListener("hashchange", render);
render();
