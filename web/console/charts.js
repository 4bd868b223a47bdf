// A volume's live performance charts: the last 30 minutes at 10 s from the metrics
// API (docs/metrics.md), read again every 10 s, when Basin takes a new sample.
import uPlot from "./vendor/uplot/uPlot.esm.js";
import { call } from "./api.js";
import { h } from "./ui.js";

const WINDOW = 30 * 60; // seconds shown
const REFRESH = 10_000; // ms, Basin's sampling interval

// Each chart: its title, unit and series (metric, label, colour, scale).
const CHARTS = [
  { id: "iops", title: "IOPS", unit: "requests/s", series: [["readIops", "Read", "#1f77b4"], ["writeIops", "Write", "#d62728"], ["metadataIops", "Metadata", "#7f7f7f"]] },
  { id: "mibps", title: "Throughput", unit: "MiB/s", series: [["readMibps", "Read", "#1f77b4"], ["writeMibps", "Write", "#d62728"], ["throughputLimitMibps", "Ceiling", "#2ca02c", true]] },
  { id: "latency", title: "Latency", unit: "ms", series: [["readLatencyMs", "Read", "#1f77b4"], ["writeLatencyMs", "Write", "#d62728"]] },
  { id: "block", title: "Block size", unit: "KiB", series: [["readBlockKib", "Read", "#1f77b4"], ["writeBlockKib", "Write", "#d62728"]] },
  { id: "limit", title: "Time at the QoS ceiling", unit: "%", scale: 100, series: [["atLimitShare", "At ceiling", "#ff7f0e"]] },
];
const METRICS = CHARTS.flatMap((c) => c.series.map((s) => s[0]));

const fmt = (v, unit) => (v === null || v === undefined ? "–" : `${v.toLocaleString("en", { maximumFractionDigits: v < 10 ? 2 : 1 })} ${unit}`);

export function volumeCharts(ctx, vid) {
  const status = h("p", { class: "hint", role: "status", "aria-live": "off" }, "Loading…");
  const grid = h("div", { class: "charts" });
  const sec = h("section", { class: "card", "aria-labelledby": "charts-title" },
    h("div", { class: "card-head" }, h("h2", { id: "charts-title" }, "Performance, last 30 minutes"), status), grid);
  const plots = [];
  for (const c of CHARTS) {
    const box = h("div", { class: "chart-box" });
    const summary = h("p", { class: "chart-now" });
    const fig = h("figure", { class: "chart", id: "chart-" + c.id, "aria-labelledby": `chart-${c.id}-title` },
      h("figcaption", { id: `chart-${c.id}-title` }, `${c.title} (${c.unit})`), box, summary);
    grid.append(fig);
    plots.push({ c, box, summary, plot: null });
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
    for (const p of plots) {
      const scale = p.c.scale || 1;
      const ys = p.c.series.map(([m]) => (byName[m] || []).map((pt) => (pt.value === null || pt.value === undefined ? null : pt.value * scale)));
      const data = [xs, ...ys.map((y) => (y.length === xs.length ? y : xs.map(() => null)))];
      if (!p.plot) {
        p.plot = new uPlot({
          width: width(p.box), height: 160, legend: { live: false },
          // From the volume's first sample (at most 30 minutes back) to now, and
          // at least the last two minutes.
          scales: { x: { time: true, range: (u, lo, hi) => [lo === null ? endSec - 120 : Math.min(lo, endSec - 120), endSec] }, y: { range: (u, lo, hi) => [0, Math.max(hi || 0, p.c.unit === "%" ? 100 : 1) * 1.05] } },
          axes: [{}, { size: 56, values: (u, vals) => vals.map((v) => v.toLocaleString("en", { maximumFractionDigits: 1 })) }],
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
      }).join(" · ");
    }
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
