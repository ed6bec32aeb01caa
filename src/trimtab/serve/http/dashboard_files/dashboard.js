// The dashboard's behaviour: reads the JSON API with the browser's token, draws the overview (queues, pending jobs
// with their reasons, running jobs, GPU map, chart) or one job's page (#job=ID: details, runs, log tail, cancel).
// No inline handlers and no eval, so a strict Content-Security-Policy holds.
"use strict";

const $ = id => document.getElementById(id);
const state = {token: "", statsHours: 6, log: {job: null, attempt: 0, offset: 0, text: ""}};
const LOG_KEEP_CHARS = 64000;
const TERMINAL = ["completed", "failed", "cancelled"];

function readHash() {
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("token")) {
    localStorage.setItem("trimtab-token", hash.get("token"));
    hash.delete("token");
    history.replaceState(null, "", "/" + (hash.toString() ? "#" + hash.toString() : ""));
  }
  state.token = localStorage.getItem("trimtab-token") || "";
  return hash;
}

function text(s) {
  return String(s ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;",
    "'": "&#39;"})[c]);
}
function colour(id) { return "hsl(" + ((id * 137) % 360) + ",65%,72%)"; }
function dur(s) {
  s = Math.max(0, Math.round(s));
  if (s < 120) { return s + " s"; }
  if (s < 7200) { return Math.round(s / 60) + " min"; }
  return (s / 3600).toFixed(1) + " h";
}
function clock(t) { return t ? new Date(t * 1000).toLocaleString() : "-"; }
function gpus(j) { return j.gpu_milli ? j.tasks * j.gpu_milli / 1000 : j.gpus; }
function jobLink(id) { return '<a href="#job=' + id + '">' + id + "</a>"; }

class Refused extends Error {}
class HttpError extends Error {
  constructor(message, status) { super(message); this.status = status; }
}

async function api(path, options = {}) {
  const r = await fetch(path, {...options, headers: {"Authorization": "Bearer " + state.token}});
  if (r.status === 401) { throw new Refused(); }
  if (!r.ok) {
    let detail = "";
    try { detail = (await r.json()).detail; } catch (e) { detail = ""; }
    throw new HttpError(path + ": HTTP " + r.status + (detail ? " - " + JSON.stringify(detail) : ""), r.status);
  }
  return r;
}
async function get(path) { return (await api(path)).json(); }

// rows(id, list, cells): cells(x) gives [html, ...] already escaped; `cls` names cells by column
function rows(id, list, cells, cls = []) {
  document.querySelector("#" + id + " tbody").innerHTML = list.map(x => "<tr>" + cells(x).map((c, i) =>
    "<td" + (cls[i] ? ' class="' + cls[i](x) + '"' : "") + ">" + c + "</td>").join("") + "</tr>").join("");
}

function show(view) {
  for (const id of ["login", "main", "jobview"]) { $(id).hidden = id !== view; }
  $("signout").hidden = view === "login";
}

function asLogin(refused) {
  show("login");
  $("problem").hidden = true;
  $("summary").textContent = refused ? "token refused" : "no token";
  $("loginhead").textContent = refused ? "The server refused this token" : "A token is needed";
  $("loginwhy").textContent = refused ?
    "The token kept in this browser is unknown to the server (mistyped, revoked, or from another server's data " +
    "directory). Give another one." :
    "This dashboard reads the server's API, and the API answers only requests that carry a token.";
  $("tokenurl").textContent = location.origin + "/#token=TOKEN";
}

function holders(d) {
  return d.jobs.map(h => "<span>" + (h.job_id >= 0 ? "job " + h.job_id : "in use") +
    (h.milli < 1000 ? " \u00b7 " + h.milli / 10 + "%" : "") + "</span>").join("");
}

function gpuMap(n) {
  $("gpumap").innerHTML = n.nodes.map(node => '<div class="node"><b>' + text(node.name) + "</b> " +
    text(node.gpu_model || "") + '<div class="gpus">' + node.devices.map(d => d.job_id === null ?
      '<div class="gpu free" title="free"><b>' + text(d.id) + "</b><span>free</span></div>" :
      '<div class="gpu busy" data-job="' + Number(d.job_id) + '"><b>' + text(d.id) + "</b>" + holders(d) +
      "</div>").join("") + "</div></div>").join("");
  // colours through the CSSOM: style attributes in markup would need 'unsafe-inline'
  document.querySelectorAll(".gpu.busy").forEach(el => { el.style.background = colour(Number(el.dataset.job)); });
}

function reasonClass(j) { return j.reason ? "reason" : "reason empty"; }

async function overview() {
  const [q, n, r, p] = await Promise.all([get("/v1/queues"), get("/v1/nodes"),
    get("/v1/jobs?state=running&limit=500"), get("/v1/jobs?state=pending&limit=500")]);
  show("main");
  $("summary").textContent = n.gpus_allocated + " of " + n.gpus_total + " GPUs allocated - policy " + n.policy +
    " - " + n.inventory;
  rows("queues", q.queues, x => [x.tenant, x.pending, x.running, x.gpus_held, x.quota_gpus ?? "-"].map(text));
  const now = Date.now() / 1000;
  rows("pending", p.jobs, j => [jobLink(j.id), text(j.name), text(j.tenant), text(gpus(j)),
    text(j.priority_class), dur(now - j.submit_s), text(j.reason || "no reason given yet")],
  [null, null, null, null, null, null, reasonClass]);
  $("pendingcount").textContent = p.jobs.length ? "(" + p.jobs.length + ")" : "";
  $("nopending").hidden = p.jobs.length > 0;
  rows("running", r.jobs, j => [jobLink(j.id), text(j.name), text(j.tenant), text(gpus(j)), text(j.attempts),
    dur(now - (j.runs.length ? j.runs[j.runs.length - 1].start_s : j.submit_s))]);
  $("norunning").hidden = r.jobs.length > 0;
  gpuMap(n);
  await drawStats(now);
}

async function drawStats(now) {
  let st = await get("/v1/stats?hours=" + state.statsHours);
  const first = Math.min(...st.samples.map(s => s.t_s), ...st.completions.map(c => c.t_s), now);
  // fit the window to the data the store holds, so a young server's chart is not squeezed to its right edge
  const fitted = Math.min(6, Math.max(0.05, (now - first) * 1.1 / 3600));
  if (Math.abs(fitted - state.statsHours) / state.statsHours > 0.25) {
    state.statsHours = Number(fitted.toPrecision(2));
    st = await get("/v1/stats?hours=" + state.statsHours);
  }
  chart(st, now);
}

function niceStep(span, ticks, steps) { return steps.find(s => span / s <= ticks) || steps[steps.length - 1]; }

function chart(st, now) {
  const svg = $("chart"), W = Math.max(svg.clientWidth, 300), H = svg.clientHeight || 200;
  const L = 44, R = 48, T = 10, B = 26, w = W - L - R, h = H - T - B;
  // from the first data point (10 s at least) to now: a young server's data spans the chart's width
  const t0 = Math.max(st.since_s, Math.min(now - 10, ...st.samples.map(s => s.t_s),
    ...st.completions.map(c => c.t_s))), span = now - t0;
  const x = t => L + (t - t0) / span * w;
  const maxc = Math.max(1, ...st.completions.map(c => c.count));
  const cstep = niceStep(maxc, 4, [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]);
  const ctop = Math.ceil(maxc / cstep) * cstep, yc = c => T + h - c / ctop * h, yu = u => T + h - u * h;
  const parts = [];
  for (let c = 0; c <= ctop; c += cstep) {
    parts.push('<line class="grid" x1="' + L + '" x2="' + (L + w) + '" y1="' + yc(c) + '" y2="' + yc(c) + '"/>' +
      '<text x="' + (L - 6) + '" y="' + (yc(c) + 4) + '" text-anchor="end">' + c + "</text>");
  }
  for (let u = 0; u <= 1.0001; u += 0.25) {
    parts.push('<text x="' + (L + w + 6) + '" y="' + (yu(u) + 4) + '">' + Math.round(u * 100) + "%</text>");
  }
  const tstep = niceStep(span, 7, [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600]);
  const format = tstep < 60 ? {hour: "2-digit", minute: "2-digit", second: "2-digit"} :
    {hour: "2-digit", minute: "2-digit"};
  for (let t = Math.ceil(t0 / tstep) * tstep; t <= now; t += tstep) {
    const hm = new Date(t * 1000).toLocaleTimeString([], format);
    parts.push('<line class="axis" x1="' + x(t) + '" x2="' + x(t) + '" y1="' + (T + h) + '" y2="' + (T + h + 4) +
      '"/><text class="tick" x="' + x(t) + '" y="' + (T + h + 16) + '" text-anchor="middle">' + hm + "</text>");
  }
  const bw = Math.max(1, st.bucket_s / span * w - 1);
  for (const c of st.completions) {
    parts.push('<rect class="bar" x="' + Math.max(L, x(c.t_s)).toFixed(1) + '" y="' + yc(c.count).toFixed(1) +
      '" width="' + bw.toFixed(1) + '" height="' + (T + h - yc(c.count)).toFixed(1) + '"><title>' + c.count +
      " completed</title></rect>");
  }
  const pts = [];  // a sample holds until the next one: steps, not slopes
  for (const p of st.samples.filter(p => p.gpus_total > 0 && p.t_s >= t0)) {
    const px = x(p.t_s).toFixed(1), py = yu(p.gpus_allocated / p.gpus_total).toFixed(1);
    if (pts.length) { pts.push(px + "," + pts[pts.length - 1].split(",")[1]); }
    pts.push(px + "," + py);
  }
  if (pts.length) { parts.push('<polyline class="line" points="' + pts.join(" ") + '"/>'); }
  parts.push('<line class="axis" x1="' + L + '" x2="' + L + '" y1="' + T + '" y2="' + (T + h) + '"/>' +
    '<line class="axis" x1="' + (L + w) + '" x2="' + (L + w) + '" y1="' + T + '" y2="' + (T + h) + '"/>' +
    '<line class="axis" x1="' + L + '" x2="' + (L + w) + '" y1="' + (T + h) + '" y2="' + (T + h) + '"/>');
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.innerHTML = parts.join("");
  $("charttitle").textContent = "Completions and GPU allocation since " + clock(t0);
  $("bucket").textContent = dur(st.bucket_s);
}

function jobFields(j) {
  const fields = [["state", j.state + (j.cancel_requested && !TERMINAL.includes(j.state) ? " (cancel requested)" : "")],
    ["reason", j.reason || (j.state === "pending" ? "no reason given yet" : "-")], ["tenant", j.tenant],
    ["priority", j.priority_class + " (" + j.priority + ")"],
    ["GPUs", j.tasks + " task(s) x " + (j.gpu_milli ? j.gpu_milli / 1000 + " GPU (shared)" : j.gpus_per_task + " GPU")],
    ["command", (j.command || []).join(" ")], ["workdir", j.workdir || "-"], ["submitted", clock(j.submit_s)],
    ["first start", clock(j.first_start_s)], ["ended", clock(j.end_s)],
    ["attempts", j.attempts + " (failures " + j.failures + ", preemptions " + j.preemptions + ", retries allowed " +
      j.retries + ")"], ["exit code", j.exit_code ?? "-"]];
  $("jobfields").querySelector("tbody").innerHTML = fields.map(([k, v]) =>
    "<tr><th>" + text(k) + "</th><td>" + text(v) + "</td></tr>").join("");
}

function noSuchJob(id) {
  show("jobview");
  $("jobtitle").textContent = "Job " + id + ": not found (or not visible with this token)";
  for (const part of ["jobfields", "jobruns"]) { $(part).querySelector("tbody").innerHTML = ""; }
  $("cancel").hidden = true;
  $("joblog").textContent = "";
}

async function jobPage(id) {
  let j;
  try { j = await get("/v1/jobs/" + id); } catch (e) {
    if (e instanceof HttpError && e.status === 404) { noSuchJob(id); return; }
    throw e;
  }
  show("jobview");
  $("summary").textContent = "job " + j.id;
  $("jobtitle").textContent = "Job " + j.id + ": " + j.name + " (" + j.state + ")";
  jobFields(j);
  rows("jobruns", j.runs, r => [r.attempt, r.rank, r.node, (r.gpus || []).join(","), r.state, clock(r.start_s),
    clock(r.end_s), r.exit_code ?? "-", r.outcome || "-"].map(text));
  $("noruns").hidden = j.runs.length > 0;
  $("cancel").hidden = TERMINAL.includes(j.state) || j.cancel_requested;
  $("cancel").dataset.job = j.id;
  await logTail(j);
}

async function logTail(j) {
  const log = state.log;
  if (log.job !== j.id) { Object.assign(log, {job: j.id, attempt: 0, offset: 0, text: ""}); }
  if (j.attempts !== log.attempt) { Object.assign(log, {attempt: j.attempts, offset: 0, text: ""}); }
  $("loghead").textContent = j.attempts ? "Log of attempt " + j.attempts + ", rank 0 (the end of it)" : "Log";
  if (!j.attempts) { $("joblog").textContent = "No output yet: the job has not started."; return; }
  for (let chunk = 0; chunk < 16; chunk++) {  // a big log is read in pieces; only its end is kept
    const r = await api("/v1/jobs/" + j.id + "/logs?attempt=" + log.attempt + "&offset=" + log.offset);
    const data = await r.text();
    log.offset = Number(r.headers.get("X-Trimtab-Offset"));
    log.text = (log.text + data).slice(-LOG_KEEP_CHARS);
    if (!data.length || r.headers.get("X-Trimtab-Done") === "1") { break; }
  }
  const pre = $("joblog"), atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.textContent = log.text || "(no output yet)";
  if (atEnd) { pre.scrollTop = pre.scrollHeight; }
}

async function cancelJob() {
  const id = $("cancel").dataset.job;
  if (!confirm("Cancel job " + id + "?")) { return; }
  try {
    const answer = await (await api("/v1/jobs/" + id + "/cancel", {method: "POST"})).json();
    $("cancelmsg").textContent = "cancel requested: job is " + answer.state;
  } catch (e) {
    $("cancelmsg").textContent = e instanceof Refused ? "the token was refused" : String(e.message);
  }
  refresh();
}

let busy = false, again = false;
async function refresh() {
  if (busy) { again = true; return; }  // a click during a slow read is served right after it
  busy = true;
  const hash = readHash();
  try {
    if (!state.token) { asLogin(false); return; }
    const job = hash.get("job");
    if (job && /^\d+$/.test(job)) { await jobPage(Number(job)); } else { await overview(); }
    $("problem").hidden = true;
  } catch (e) {
    if (e instanceof Refused) { asLogin(true); return; }
    $("problem").hidden = false;
    $("problem").textContent = "cannot read the server: " + e.message + " (retrying every 3 s)";
  } finally {
    busy = false;
    if (again) { again = false; refresh(); }
  }
}

$("tokenform").addEventListener("submit", e => {
  e.preventDefault();
  localStorage.setItem("trimtab-token", $("token").value.trim());
  $("token").value = "";
  refresh();
});
$("openjob").addEventListener("submit", e => {
  e.preventDefault();
  const id = $("jobid").value.trim();
  if (/^\d+$/.test(id)) { location.hash = "job=" + id; }
});
$("signout").addEventListener("click", () => { localStorage.removeItem("trimtab-token"); refresh(); });
$("cancel").addEventListener("click", cancelJob);
window.addEventListener("hashchange", refresh);
refresh();
setInterval(refresh, 3000);
