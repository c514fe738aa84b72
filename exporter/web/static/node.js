// The live node page: fetches gpus.json and health from this exporter (same origin) and redraws.
// Every value from the exporter, pod names and labels included, reaches the page only through
// textContent, attributes set with setAttribute and CSS widths, never through innerHTML: a hostile
// pod name stays text.
//
// Time is part of what the page shows: the data's age is computed from the exporter's own clocks
// (served_at - sampled_at, both the server's) plus the time since that answer arrived (this
// browser's monotonic clock), so it keeps growing while the exporter is paused or gone and no fetch
// answers. Past stale_after_s, when a fetch times out, or when /health is not OK the page says
// "stale" in text, turns amber and greys every value; when the exporter cannot be reached at all the
// cards lose their colour and say since when.
"use strict";

const REFRESH_MS = 2000;  // pause between the end of one refresh and the start of the next
const REQUEST_TIMEOUT_MS = 5000;  // a paused exporter accepts connections and never answers
const TICK_MS = 1000;  // the ages on screen are redrawn this often, whether or not a fetch answers

const state = {
  view: null,           // the last gpus.json that arrived
  viewAt: null,         // performance.now() when it arrived
  viewAgeAtArrival: 0,  // served_at - sampled_at of that answer, in seconds
  failure: null,        // {kind: "timeout"|"unreachable"|"http", message, since: Date.now()} or null
  health: null,         // {ok, text, at: performance.now()} of the last /health answer
  healthFailure: null,  // why the last /health request got no answer
};

// Request URLs carry no credentials: opened as https://user:pass@host/, location.href holds them and
// fetch refuses any URL with credentials; the browser still sends the cached Authorization header.
function endpoint(path) {
  const url = new URL(path, location.href);
  url.username = "";
  url.password = "";
  url.hash = "";
  return url.href;
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function fmt(value, digits, unit) {
  if (value === null || value === undefined) return "n/a";
  return value.toFixed(digits) + unit;
}

function mib(value) {
  if (value === null || value === undefined) return "n/a";
  return value >= 1024 ? (value / 1024).toFixed(1) + " GiB" : value.toFixed(0) + " MiB";
}

function clock(epochSeconds) {
  if (epochSeconds === null || epochSeconds === undefined) return "never";
  const t = new Date(epochSeconds * 1000);
  return [t.getHours(), t.getMinutes(), t.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}

function age(seconds) {
  if (seconds < 10) return Math.max(0, Math.round(seconds * 10) / 10) + " s";
  if (seconds < 120) return Math.round(seconds) + " s";
  if (seconds < 7200) return Math.round(seconds / 60) + " min";
  return Math.round(seconds / 3600) + " h";
}

function bar(label, percent, text, kind) {
  const row = el("div", "row");
  row.appendChild(el("span", "label", label));
  const track = el("div", "bar");
  const fill = el("div", "fill" + (kind ? " " + kind : ""));
  const clamped = percent === null ? 0 : Math.max(0, Math.min(100, percent));
  fill.style.width = clamped + "%";
  track.appendChild(fill);
  row.appendChild(track);
  row.appendChild(el("span", "value", text));
  return row;
}

function cell(row, className, title, text) {
  const td = el("td", className, text);
  td.setAttribute("data-label", title);  // the column's name, shown beside the value on a narrow screen
  row.appendChild(td);
}

function containersTable(containers, shared) {
  const table = el("table", "pods");
  const titles = ["namespace", "pod", "container", "team", "MIG", "SM util", "memory"];
  const head = el("tr");
  for (const title of titles) head.appendChild(el("th", null, title));
  table.appendChild(head);
  for (const c of containers) {
    const row = el("tr", "pod");
    cell(row, null, titles[0], c.namespace);
    cell(row, "pod-name", titles[1], c.pod);
    cell(row, null, titles[2], c.container);
    cell(row, null, titles[3], c.team || "");
    cell(row, null, titles[4], c.gpu_instance_id === null ? "" : c.gpu_instance_id);
    cell(row, "num", titles[5], shared || c.sm_util_percent !== null ? fmt(c.sm_util_percent, 0, " %") : "");
    cell(row, "num", titles[6], c.memory_used_mib === null ? "" : mib(c.memory_used_mib));
    table.appendChild(row);
  }
  return table;
}

// Every firing condition, in text: the severity as a word, the reason, and the alert that fires for it.
function conditionList(conditions, className) {
  const list = el("ul", className);
  for (const condition of conditions) {
    const severity = ["critical", "warning", "info"].includes(condition.severity) ? condition.severity : "warning";
    const item = el("li", "condition " + severity);
    item.setAttribute("data-condition", condition.id);
    item.appendChild(el("span", "severity", severity));
    item.appendChild(el("span", "text", condition.text));
    if (condition.alert) item.appendChild(el("span", "alert", condition.alert));
    list.appendChild(item);
  }
  return list;
}

// The card's state in words, and its colour class: lost or unhealthy or a critical condition is
// "bad", a warning is "warn", a healthy GPU with nothing firing is "good".
function gpuState(gpu, conditions) {
  const critical = conditions.filter((c) => c.severity === "critical").length;
  const warnings = conditions.filter((c) => c.severity !== "critical" && c.severity !== "info").length;
  const firing = conditions.length === 1 ? "1 condition" : conditions.length + " conditions";
  const more = (gpu.up === false ? "; not answering" : "") + (conditions.length ? "; " + firing : "");
  if (gpu.healthy === false) return ["bad", "unhealthy: " + (gpu.health_reason || "unknown reason") + more];
  if (gpu.up === false) return ["bad", "lost: the GPU is not answering" + (conditions.length ? "; " + firing : "")];
  if (critical) return ["bad", "critical: " + firing + " firing"];
  if (warnings) return ["warn", "warning: " + firing + " firing"];
  const none = conditions.length ? firing + " for information" : "no condition firing";
  if (gpu.healthy === true) return ["good", "healthy: " + none];
  return ["unknown", "health unknown: " + none];
}

function gpuCard(gpu, asOf) {
  const conditions = gpu.conditions || [];
  const [kind, text] = gpuState(gpu, conditions);
  const card = el("section", "gpu " + kind);
  card.id = "gpu-" + gpu.gpu;
  card.appendChild(el("h2", null, "GPU " + gpu.gpu + " · " + (gpu.model || "unknown model")));
  card.appendChild(el("div", "uuid", gpu.uuid + "  " + gpu.pci_bus_id));
  if (asOf) card.appendChild(el("div", "as-of", asOf));
  card.appendChild(el("div", "health " + kind, (asOf ? "last known: " : "") + text));
  if (conditions.length) card.appendChild(conditionList(conditions, "conditions"));
  if (gpu.up !== false) {
    card.appendChild(bar("utilisation", gpu.utilization_percent, fmt(gpu.utilization_percent, 0, " %")));
    const memPercent = gpu.memory_total_mib ? 100 * gpu.memory_used_mib / gpu.memory_total_mib : null;
    card.appendChild(bar("memory", memPercent, mib(gpu.memory_used_mib) + " / " + mib(gpu.memory_total_mib), "mem"));
    const power = fmt(gpu.power_w, 0, " W") + (gpu.power_limit_w ? " of " + fmt(gpu.power_limit_w, 0, " W") : "");
    card.appendChild(el("div", "facts", "temperature " + fmt(gpu.temperature_c, 0, " °C") + " · power " + power));
  }
  const xid = gpu.xid || {};
  if (xid.last || xid.recent_count) {
    const window = xid.window_s ? " in the last " + Math.round(xid.window_s / 60) + " min" : "";
    const last = xid.last ? "last Xid " + xid.last.code + " (" + xid.last.message + ")" : "";
    const recent = xid.recent_count !== null && xid.recent_count !== undefined
      ? " · " + xid.recent_count + " Xid event(s)" + window : "";
    card.appendChild(el("div", "xid", last + recent));
  }
  if (gpu.mig.length) {
    const mig = el("table", "mig");
    const titles = ["MIG instance", "profile", "engine active", "memory"];
    const head = el("tr");
    for (const title of titles) head.appendChild(el("th", null, title));
    mig.appendChild(head);
    for (const inst of gpu.mig) {
      const row = el("tr");
      cell(row, null, titles[0], inst.gpu_instance_id);
      cell(row, null, titles[1], inst.profile);
      cell(row, "num", titles[2], fmt(inst.engine_active_percent, 0, " %"));
      cell(row, "num", titles[3], mib(inst.memory_used_mib) + " / " + mib(inst.memory_total_mib));
      mig.appendChild(row);
    }
    card.appendChild(mig);
  }
  if (gpu.containers.length) {
    card.appendChild(containersTable(gpu.containers, gpu.containers.length > 1));
  } else {
    card.appendChild(el("div", "none", "no pod"));
  }
  return card;
}

// The data's age now, in seconds: its age when the exporter served it plus the time since it arrived.
function dataAge() {
  if (!state.view || !state.view.sampled_at) return null;
  return state.viewAgeAtArrival + (performance.now() - state.viewAt) / 1000;
}

function outage() {
  const what = state.failure.kind === "http" ? "exporter failing since " : "exporter unreachable since ";
  return what + clock(state.failure.since / 1000);
}

// "fresh", "stale" or "gone", with the sentence that says why.
function freshness() {
  const view = state.view;
  const ageNow = dataAge();
  const last = view ? "last sample " + clock(view.sampled_at) : "no data yet";
  const old = ageNow === null ? last : "data " + age(ageNow) + " old, " + last;
  if (state.failure && state.failure.kind !== "timeout") {
    return ["gone", outage() + " (" + state.failure.message + "); showing " + old];
  }
  const reasons = [];
  if (state.failure) reasons.push("the exporter has not answered since " + clock(state.failure.since / 1000));
  if (ageNow !== null && view.stale_after_s !== null && view.stale_after_s !== undefined &&
      ageNow > view.stale_after_s) {
    reasons.push("older than " + age(view.stale_after_s));
  }
  if (state.health && !state.health.ok) reasons.push("/health is failing");
  if (reasons.length) return ["stale", "stale: " + old + "; " + reasons.join("; ")];
  const gpus = view ? view.gpus.length + " GPU(s) · " : "";
  return ["fresh", gpus + old];
}

function renderStatus() {
  const [kind, text] = freshness();
  document.body.setAttribute("data-freshness", kind);
  const status = document.getElementById("status");
  status.className = "status " + kind;
  status.textContent = text;
  const health = document.getElementById("health");
  if (state.health) {
    const asked = (performance.now() - state.health.at) / 1000;
    health.textContent = state.health.text + " (answered " + age(asked) + " ago" +
      (state.healthFailure ? "; since then " + state.healthFailure : "") + ")";
  } else if (state.healthFailure) {
    health.textContent = "no answer: " + state.healthFailure;
  }
  // A failing /health is the first thing to read, not grey header text.
  const alarm = document.getElementById("alarm");
  if (state.health && !state.health.ok) {
    alarm.hidden = false;
    alarm.textContent = "/health is failing: " + state.health.text;
  } else {
    alarm.hidden = true;
    alarm.textContent = "";
  }
  return kind;
}

function render() {
  const kind = renderStatus();
  const view = state.view;
  if (!view) return;
  const asOf = kind === "fresh" ? null : kind === "gone"
    ? outage() + "; as of " + clock(view.sampled_at)
    : "stale: as of " + clock(view.sampled_at);
  document.getElementById("gpus").replaceChildren(...view.gpus.map((gpu) => gpuCard(gpu, asOf)));
  const nodeConditions = view.conditions || [];
  const holder = document.getElementById("node-conditions");
  holder.replaceChildren(...(nodeConditions.length ? [conditionList(nodeConditions, "conditions node")] : []));
  if (view.node) {
    document.getElementById("node").textContent = view.node;
    document.title = "gpu-pod-exporter · " + view.node;
  }
}

async function get(path) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), REQUEST_TIMEOUT_MS);
  try {
    return await fetch(endpoint(path), {credentials: "same-origin", cache: "no-store", signal: controller.signal});
  } catch (error) {
    if (error.name === "AbortError") {
      throw Object.assign(new Error("no answer within " + REQUEST_TIMEOUT_MS / 1000 + " s"), {kind: "timeout"});
    }
    throw Object.assign(new Error(error.message || String(error)), {kind: "unreachable"});
  } finally {
    clearTimeout(timer);
  }
}

function failed(error) {
  const kind = error.kind || "http";
  // "since" is when the trouble started: kept while the failures go on, so the page says how long.
  const since = state.failure ? state.failure.since : Date.now();
  state.failure = {kind: kind, message: error.message, since: since};
}

async function refreshView() {
  try {
    const response = await get("gpus.json");
    if (!response.ok) throw Object.assign(new Error("HTTP " + response.status), {kind: "http"});
    const view = await response.json();
    const arrived = performance.now();
    const servedAt = typeof view.served_at === "number" ? view.served_at : Date.now() / 1000;
    state.view = view;
    state.viewAt = arrived;
    state.viewAgeAtArrival = view.sampled_at ? Math.max(0, servedAt - view.sampled_at) : 0;
    state.failure = null;
  } catch (error) {
    failed(error);
  }
}

async function refreshHealth() {
  try {
    // /health answers 503 with the reason when the exporter is blind: the reason is shown either way.
    const response = await get("health");
    const text = (await response.text()).trim();
    state.health = {ok: response.ok, text: text || "HTTP " + response.status, at: performance.now()};
    state.healthFailure = null;
  } catch (error) {
    state.healthFailure = "no answer (" + error.message + ")";
  }
}

async function refresh() {
  try {
    await Promise.all([refreshView(), refreshHealth()]);
    render();
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  refresh();
  // The ages and the stale/gone state follow the clock even while a request hangs.
  let shown = null;
  setInterval(() => {
    const kind = renderStatus();
    if (kind !== shown) render();
    shown = kind;
  }, TICK_MS);
});
