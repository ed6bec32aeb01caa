"""The web dashboard at `/`: one self-contained page (no CDN, no external file) showing queues, running jobs, a GPU
map, and completions and utilisation over the last hours, refreshed every few seconds from the JSON API.

The token comes from the URL fragment (`/#token=...`, never sent to the server in the URL) or a form, and is kept in
the browser's localStorage."""

from __future__ import annotations

DASHBOARD_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>trimtab</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body{font:14px system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
 header{background:#1d2330;color:#fff;padding:10px 18px;display:flex;gap:18px;align-items:baseline}
 header h1{font-size:18px;margin:0} header span{opacity:.8}
 main{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:14px;padding:14px}
 section{background:#fff;border-radius:6px;padding:12px 14px;box-shadow:0 1px 2px #0002}
 h2{font-size:15px;margin:0 0 8px} table{border-collapse:collapse;width:100%}
 td,th{text-align:left;padding:3px 6px;border-bottom:1px solid #eee;font-variant-numeric:tabular-nums}
 .gpus{display:flex;flex-wrap:wrap;gap:4px} .gpu{width:58px;height:42px;border-radius:4px;font-size:11px;
 display:flex;flex-direction:column;align-items:center;justify-content:center;border:1px solid #ccd}
 .free{background:#eef1f5;color:#889} .node{margin-bottom:8px} #login{display:none;padding:14px}
 svg{width:100%;height:120px;background:#fafbfc} .err{color:#b00020}
</style></head><body>
<header><h1>trimtab</h1><span id="summary">loading...</span></header>
<div id="login"><form id="tokenform">Token: <input id="token" size="50" autocomplete="off">
 <button>Use</button></form><p class="err" id="loginerr"></p></div>
<main id="main">
 <section><h2>Queues</h2><table id="queues"><thead><tr><th>tenant</th><th>pending</th><th>running</th>
  <th>GPUs held</th><th>quota</th></tr></thead><tbody></tbody></table></section>
 <section><h2>GPU map</h2><div id="gpumap"></div></section>
 <section><h2>Running jobs</h2><table id="running"><thead><tr><th>id</th><th>name</th><th>tenant</th>
  <th>GPUs</th><th>attempt</th><th>running for</th></tr></thead><tbody></tbody></table></section>
 <section><h2>Completions and GPU utilisation, last 6 hours</h2>
  <svg id="chart" viewBox="0 0 600 120" preserveAspectRatio="none"></svg>
  <div><span style="color:#3b7dd8">&#9632;</span> completions per bucket
   <span style="color:#e07b39">&#9632;</span> GPUs allocated / total</div></section>
</main>
<script>
"use strict";
const hash = new URLSearchParams(location.hash.slice(1));
if (hash.get("token")) {
  localStorage.setItem("trimtab-token", hash.get("token")); history.replaceState(null, "", "/"); }
let token = localStorage.getItem("trimtab-token") || "";
document.getElementById("tokenform").addEventListener("submit", e => {
  e.preventDefault(); token = document.getElementById("token").value.trim();
  localStorage.setItem("trimtab-token", token); refresh(); });
function colour(id) { return "hsl(" + ((id * 137) % 360) + ",65%,72%)"; }
function text(s) { return String(s).replace(/[&<>"]/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;","\\"":"&quot;"})[c]); }
async function get(path) {
  const r = await fetch(path, {headers: {"Authorization": "Bearer " + token}});
  if (r.status === 401) { throw new Error("401"); }
  if (!r.ok) { throw new Error(path + ": HTTP " + r.status); }
  return r.json();
}
function rows(id, list, cells) {
  document.querySelector("#" + id + " tbody").innerHTML =
    list.map(x => "<tr>" + cells(x).map(c => "<td>" + text(c) + "</td>").join("") + "</tr>").join("");
}
function holders(d) {  // "job 7" for a whole GPU; "job 7 50%, job 8 50%" for shares
  return d.jobs.map(h => (h.job_id >= 0 ? "job " + h.job_id : "in use") +
    (h.milli < 1000 ? " " + h.milli / 10 + "%" : "")).join(", ");
}
function dur(s) { s = Math.max(0, Math.round(s)); return s < 120 ? s + " s" : Math.round(s / 60) + " min"; }
function chart(stats) {
  const svg = document.getElementById("chart"), W = 600, H = 120, t0 = stats.since_s, span = Date.now() / 1000 - t0;
  const x = t => (t - t0) / span * W;
  const maxc = Math.max(1, ...stats.completions.map(c => c.count));
  let out = stats.completions.map(c => '<rect class="bar" x="' + x(c.t_s).toFixed(1) + '" y="' +
    (H - c.count / maxc * H).toFixed(1) + '" width="' + Math.max(1, stats.bucket_s / span * W - 1).toFixed(1) +
    '" height="' + (c.count / maxc * H).toFixed(1) + '" fill="#3b7dd8" opacity="0.6"></rect>').join("");
  const pts = stats.samples.filter(p => p.gpus_total > 0)
    .map(p => x(p.t_s).toFixed(1) + "," + (H - p.gpus_allocated / p.gpus_total * (H - 2)).toFixed(1));
  if (pts.length) { out += '<polyline fill="none" stroke="#e07b39" stroke-width="2" points="' + pts.join(" ") + '"/>'; }
  svg.innerHTML = out;
}
async function refresh() {
  try {
    const [q, n, r, st] = await Promise.all([get("/v1/queues"), get("/v1/nodes"),
      get("/v1/jobs?state=running&limit=500"), get("/v1/stats?hours=6")]);
    document.getElementById("login").style.display = "none";
    document.getElementById("main").style.display = "";
    document.getElementById("summary").textContent = n.gpus_allocated + " of " + n.gpus_total +
      " GPUs allocated - policy " + n.policy + " - " + n.inventory;
    rows("queues", q.queues, x => [x.tenant, x.pending, x.running, x.gpus_held, x.quota_gpus ?? "-"]);
    const now = Date.now() / 1000;
    rows("running", r.jobs, j => [j.id, j.name, j.tenant, j.gpu_milli ? j.tasks * j.gpu_milli / 1000 : j.gpus,
      j.attempts, dur(now - (j.runs.length ?
      j.runs[j.runs.length - 1].start_s : j.submit_s))]);
    document.getElementById("gpumap").innerHTML = n.nodes.map(node => '<div class="node"><b>' + text(node.name) +
      "</b> " + text(node.gpu_model || "") + '<div class="gpus">' + node.devices.map(d => d.job_id === null ?
      '<div class="gpu free" title="free">' + text(d.id) + "<span>free</span></div>" :
      '<div class="gpu busy" style="background:' + colour(d.job_id) + '" title="' + holders(d) + '">' +
      text(d.id) + "<span>" + holders(d) + "</span></div>").join("") +
      "</div></div>").join("");
    chart(st);
  } catch (e) {
    if (e.message === "401") {
      document.getElementById("login").style.display = "block";
      document.getElementById("main").style.display = "none";
      document.getElementById("loginerr").textContent = token ? "that token was refused" : "a token is needed";
    } else { document.getElementById("summary").textContent = "error: " + e.message; }
  }
}
refresh(); setInterval(refresh, 3000);
</script></body></html>
"""
