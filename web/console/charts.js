// A volume's live performance charts: the last 30 minutes at 10 s from the metrics
// API (docs/metrics.md), read again every 10 s, when Basin takes a new sample.
import uPlot from "./vendor/uplot/uPlot.esm.js";
import { call } from "./api.js";
import { h } from "./ui.js";

const WINDOW = 30 * 60; // seconds shown
const REFRESH = 10_000; // ms, Basin's sampling interval

// Each chart: its title, unit, series (metric, label, colour, dashed: a reference
// line such as the ceiling), a note under it, and what it says when it has
// nothing to draw: none (every value unknown) or idle (all zero).
const CHARTS = [
  { id: "iops", title: "IOPS", unit: "requests/s", series: [["readIops", "Read", "#1f77b4"], ["writeIops", "Write", "#d62728"], ["metadataIops", "Metadata", "#7f7f7f"]],
    idle: "No requests in this window." },
  { id: "mibps", title: "Throughput", unit: "MiB/s",
    series: [["readMibps", "Read", "#1f77b4"], ["writeMibps", "Write", "#d62728"], ["totalMibps", "Total", "#6a3d9a"], ["throughputLimitMibps", "Ceiling", "#2ca02c", true]],
    note: "The QoS ceiling applies to read and write together (Total), counted on the wire: at the ceiling the total runs a few percent under the line, the rest being headers.",
    idle: "No data moved in this window." },
  { id: "latency", title: "Latency, server-side", unit: "ms", series: [["readLatencyMs", "Read", "#1f77b4"], ["writeLatencyMs", "Write", "#d62728"]],
    note: "As the NFS and SMB servers time a request, from a worker taking it to its reply. Clients see more: the network, their own queues, and at the QoS ceiling the shaper holding replies, which leaves this low while clients wait.",
    none: "No reads or writes in this window, so no latency." },
  { id: "block", title: "Block size", unit: "KiB", series: [["readBlockKib", "Read", "#1f77b4"], ["writeBlockKib", "Write", "#d62728"]],
    none: "No reads or writes in this window." },
  { id: "limit", title: "Time at the QoS ceiling", unit: "%", scale: 100, series: [["atLimitShare", "At ceiling", "#ff7f0e"]],
    idle: "Never at the ceiling in this window.", none: "Not measured: no QoS ceiling." },
];
// Series the console adds up itself, from the metrics it reads.
const DERIVED = { totalMibps: ["readMibps", "writeMibps"] };
// usedBytes is read along for the page's space meter (onUsed).
const METRICS = CHARTS.flatMap((c) => c.series.map((s) => s[0])).filter((m) => !DERIVED[m]).concat("usedBytes");

// Axis times as the rest of the page writes them: 24-hour, with seconds only
// when the ticks are less than a minute apart.
const tick = (t, incr) => new Date(t * 1000).toLocaleTimeString("en-GB", incr < 60 ? {} : { hour: "2-digit", minute: "2-digit" });

// series reads a metric's values from the answer (byName), adding up derived
// ones: unknown if any part is.
function series(byName, m, n) {
  const parts = (DERIVED[m] || [m]).map((x) => byName[x] || []);
  if (parts.some((p) => p.length !== n)) return Array.from({ length: n }, () => null);
  return Array.from({ length: n }, (_, i) => {
    let sum = 0;
    for (const p of parts) {
      const v = p[i]?.value;
      if (v === null || v === undefined) return null;
      sum += v;
    }
    return sum;
  });
}

const fmt = (v, unit) => (v === null || v === undefined ? "–" : `${v.toLocaleString("en", { maximumFractionDigits: v < 10 ? 2 : 1 })} ${unit}`);

// volumeCharts: onUsed, if given, is told the volume's latest usedBytes when
// they are known.
export function volumeCharts(ctx, vid, onUsed) {
  const status = h("p", { class: "hint", role: "status", "aria-live": "off" }, "Loading…");
  const grid = h("div", { class: "charts" });
  const sec = h("section", { class: "card", "aria-labelledby": "charts-title" },
    h("div", { class: "card-head" }, h("h2", { id: "charts-title" }, "Performance, last 30 minutes"), status), grid);
  const plots = [];
  for (const c of CHARTS) {
    const empty = h("p", { class: "chart-empty", hidden: true });
    const box = h("div", { class: "chart-box" }, empty);
    const summary = h("p", { class: "chart-now" });
    const note = c.note && h("p", { class: "chart-note", id: `chart-${c.id}-note` }, c.note);
    const fig = h("figure", { class: "chart", id: "chart-" + c.id, "aria-labelledby": `chart-${c.id}-title`, "aria-describedby": note ? note.id : undefined },
      h("figcaption", { id: `chart-${c.id}-title`, title: c.note }, `${c.title} (${c.unit})`), box, summary, note);
    grid.append(fig);
    plots.push({ c, box, empty, summary, plot: null, blank: false });
  }
  let timer = null;
  let stopped = false;
  let endSec = Date.now() / 1000;
  const width = (box) => Math.max(240, box.clientWidth || 320);
  const draw = async () => {
    const end = new Date();
    const start = new Date(end - WINDOW * 1000);
    let res;
    try {
      res = await call("GET", `${ctx.parent}/volumes/${encodeURIComponent(vid)}/metrics`, {
        query: { metric: METRICS.join(","), startTime: start.toISOString(), endTime: end.toISOString(), step: "10s" },
      });
    } catch (err) {
      status.textContent = "Metrics unavailable: " + err.message;
      return;
    }
    if (stopped) return;
    const byName = Object.fromEntries((res.series || []).map((s) => [s.metric, s.points || []]));
    const xs = (byName[METRICS[0]] || []).map((p) => new Date(p.time).getTime() / 1000);
    endSec = end.getTime() / 1000;
    // The share of the latest interval at the ceiling: the server's latency
    // leaves out the shaper's hold, so say so where it matters.
    const atLimit = [...series(byName, "atLimitShare", xs.length)].reverse().find((v) => v !== null) ?? 0;
    for (const p of plots) {
      const scale = p.c.scale || 1;
      const ys = p.c.series.map(([m]) => series(byName, m, xs.length).map((v) => (v === null ? null : v * scale)));
      const data = [xs, ...ys];
      // Nothing to draw (the reference lines aside): say why over the chart,
      // and leave the y axis without numbers rather than a bare 0 to 1.
      const some = (y) => y.some((v) => v !== null && v > 0);
      const own = ys.filter((_, i) => !p.c.series[i][3]);
      p.blank = !ys.some(some);
      p.empty.textContent = !xs.length ? "No samples yet: Basin samples every 10 s."
        : own.some((y) => y.some((v) => v !== null)) ? p.c.idle || "All zero in this window." : p.c.none || "Not measured in this window.";
      p.empty.hidden = own.some(some);
      if (!p.plot) {
        p.plot = new uPlot({
          width: width(p.box), height: 160, legend: { live: false },
          // From the volume's first sample (at most 30 minutes back) to now, and
          // at least the last two minutes.
          scales: { x: { time: true, range: (u, lo, hi) => [lo === null ? endSec - 120 : Math.min(lo, endSec - 120), endSec] }, y: { range: (u, lo, hi) => [0, Math.max(hi || 0, p.c.unit === "%" ? 100 : 1) * 1.05] } },
          axes: [{ space: 72, values: (u, vals, ax, space, incr) => vals.map((v) => (v === null ? "" : tick(v, incr))) },
            { size: 56, values: (u, vals) => vals.map((v) => (p.blank || v === null ? "" : v.toLocaleString("en", { maximumFractionDigits: 1 }))) }],
          series: [{}, ...p.c.series.map(([, label, stroke, dashed]) => ({ label, stroke, width: 1.5, dash: dashed ? [6, 4] : undefined, spanGaps: false }))],
        }, data, p.box);
      } else {
        p.plot.setData(data);
      }
      p.box.parentElement.dataset.points = String(ys[0].filter((v) => v !== null && v > 0).length);
      // The latest value of each series, in words, for everyone (and screen readers).
      p.summary.textContent = "Now: " + p.c.series.map(([m, label], i) => {
        const last = [...ys[i]].reverse().find((v) => v !== null);
        return `${label} ${fmt(last ?? null, p.c.unit)}`;
      }).join(" · ") + (p.c.id === "latency" && atLimit > 0.005
        ? ` · at the QoS ceiling ${Math.round(atLimit * 100)} % of the last 10 s: clients wait longer than this` : "");
    }
    const used = [...series(byName, "usedBytes", xs.length)].reverse().find((v) => v !== null);
    if (onUsed && used !== undefined) onUsed(used);
    status.textContent = "Updated " + end.toLocaleTimeString("en-GB") + "; refreshes every 10 s.";
    grid.dataset.updated = String(end.getTime());
  };
  const loop = async () => {
    await draw();
    if (!stopped) timer = setTimeout(loop, REFRESH);
  };
  const resize = new ResizeObserver(() => {
    for (const p of plots) if (p.plot) p.plot.setSize({ width: width(p.box), height: 160 });
  });
  resize.observe(grid);
  ctx.onStop(() => {
    stopped = true;
    clearTimeout(timer);
    resize.disconnect();
  });
  // Start once the section is in the page (its width is known).
  requestAnimationFrame(loop);
  return sec;
}
