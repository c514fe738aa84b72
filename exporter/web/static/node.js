// The live node page: fetches gpus.json from this exporter (same origin) and redraws.
// Every value from the exporter, pod names and labels included, reaches the page only through
// textContent and CSS widths, never through innerHTML: a hostile pod name stays text.
"use strict";

const REFRESH_MS = 2000;

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

function containersTable(containers, shared) {
  const table = el("table", "pods");
  const head = el("tr");
  for (const title of ["namespace", "pod", "container", "team", "MIG", "SM util", "memory"]) {
    head.appendChild(el("th", null, title));
  }
  table.appendChild(head);
  for (const c of containers) {
    const row = el("tr", "pod");
    row.appendChild(el("td", null, c.namespace));
    row.appendChild(el("td", "pod-name", c.pod));
    row.appendChild(el("td", null, c.container));
    row.appendChild(el("td", null, c.team || ""));
    row.appendChild(el("td", null, c.gpu_instance_id === null ? "" : c.gpu_instance_id));
    row.appendChild(el("td", "num", shared || c.sm_util_percent !== null ? fmt(c.sm_util_percent, 0, " %") : ""));
    row.appendChild(el("td", "num", c.memory_used_mib === null ? "" : mib(c.memory_used_mib)));
    table.appendChild(row);
  }
  return table;
}

function gpuCard(gpu) {
  const card = el("section", "gpu");
  card.id = "gpu-" + gpu.gpu;
  const bad = gpu.healthy === false || gpu.up === false;
  const idle = !bad && gpu.allocated && gpu.utilization_percent === 0;
  if (bad) card.classList.add("unhealthy");
  if (idle) card.classList.add("idle");
  card.appendChild(el("h2", null, "GPU " + gpu.gpu + " · " + (gpu.model || "unknown model")));
  card.appendChild(el("div", "uuid", gpu.uuid + "  " + gpu.pci_bus_id));
  let healthText = gpu.healthy === null ? (gpu.up === false ? "lost" : "health unknown")
    : (gpu.healthy ? "healthy" : "unhealthy: " + (gpu.health_reason || "unknown reason"));
  if (gpu.up === false && gpu.healthy !== false) healthText = "not answering";
  if (idle) healthText += " · allocated but idle";
  card.appendChild(el("div", "health " + (bad ? "bad" : "good"), healthText));
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
    const head = el("tr");
    for (const title of ["MIG instance", "profile", "engine active", "memory"]) head.appendChild(el("th", null, title));
    mig.appendChild(head);
    for (const inst of gpu.mig) {
      const row = el("tr");
      row.appendChild(el("td", null, inst.gpu_instance_id));
      row.appendChild(el("td", null, inst.profile));
      row.appendChild(el("td", "num", fmt(inst.engine_active_percent, 0, " %")));
      row.appendChild(el("td", "num", mib(inst.memory_used_mib) + " / " + mib(inst.memory_total_mib)));
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

function render(view) {
  const main = document.getElementById("gpus");
  const cards = view.gpus.map(gpuCard);
  main.replaceChildren(...cards);
  if (view.node) {
    document.getElementById("node").textContent = view.node;
    document.title = "gpu-pod-exporter · " + view.node;
  }
  const status = document.getElementById("status");
  const when = view.sampled_at ? new Date(view.sampled_at * 1000).toLocaleTimeString() : "never";
  status.className = "status";
  status.textContent = view.gpus.length + " GPU(s) · sampled " + when + " · refreshes every " +
    REFRESH_MS / 1000 + " s";
}

async function refresh() {
  try {
    const response = await fetch("gpus.json", {credentials: "same-origin", cache: "no-store"});
    if (!response.ok) throw new Error("HTTP " + response.status);
    render(await response.json());
    // /health answers 503 with the reason when the exporter is blind: show the reason either way.
    const health = await fetch("health", {credentials: "same-origin", cache: "no-store"});
    document.getElementById("health").textContent = (await health.text()).trim();
  } catch (error) {
    const status = document.getElementById("status");
    status.className = "status stale";
    status.textContent = "cannot refresh (" + error.message + "); showing the last data";
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

document.addEventListener("DOMContentLoaded", refresh);
