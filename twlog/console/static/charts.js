// Live charts over the console's samples (GET /api/history), drawn with uPlot (static/vendor/, MIT).

import { get, query } from "./api.js";
import { bytes, h, num } from "./ui.js";

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];

/** Merge [[t, v], ...] series onto one time axis, for uPlot: [[t...], [v or null...], ...]. */
export function align(seriesList) {
  const times = [...new Set(seriesList.flatMap((points) => points.map(([t]) => t)))].sort((a, b) => a - b);
  const index = new Map(times.map((t, i) => [t, i]));
  const columns = seriesList.map((points) => {
    const column = new Array(times.length).fill(null);
    for (const [t, v] of points) column[index.get(t)] = v;
    return column;
  });
  return [times, ...columns];
}

/**
 * A chart of some series of /api/history, in `parent`.  `unit` is "bytes", "bytes/s" or "" (a count).
 * Returns {element, update(historyAnswer), load()}: load() asks the API for the last `minutes`.
 * The element carries data-points (how many samples it draws), which the browser tests read.
 */
export function historyChart({ title, names, labels = null, unit = "", minutes = 60, prefix = null,
  pick = null }) {
  const plotBox = h("div", { class: "plot" });
  const empty = h("p", { class: "muted empty" }, "No samples yet: the console samples every few seconds (a figure the brokers' metrics lack stays empty).");
  const element = h("figure", { class: "chart", dataset: { series: (names || []).join(","), points: "0" } },
    h("figcaption", {}, title), plotBox, empty);
  let plot = null;
  let shown = [];

  function format(value) {
    if (value === null || value === undefined) return "–";
    if (unit === "bytes") return bytes(Math.round(value));
    if (unit === "bytes/s") return `${bytes(Math.round(value))}/s`;
    if (unit === "/s") return `${num(value)}/s`;
    return num(value);
  }

  function build(seriesNames, data) {
    const width = Math.max(320, (element.clientWidth || plotBox.clientWidth || 560) - 16);
    const opts = {
      width,
      height: 190,
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true } },
      axes: [
        { stroke: "#555", grid: { stroke: "#eee" } },
        { stroke: "#555", grid: { stroke: "#eee" }, size: 84, values: (u, ticks) => ticks.map(format) },
      ],
      series: [{}, ...seriesNames.map((name, i) => ({
        label: labels ? labels(name) : name,
        stroke: COLORS[i % COLORS.length],
        width: 2,
        spanGaps: true,
        value: (u, v) => format(v),
      }))],
    };
    plotBox.replaceChildren();
    if (plot) {
      plot.destroy();
      plots.delete(plot);
    }
    plot = new window.uPlot(opts, data, plotBox);
    plots.set(plot, plotBox);
  }

  function update(answer) {
    const series = answer.series || {};
    // (with a prefix, every series answered, the named ones first; else the named ones, in their order)
    let seriesNames = prefix
      ? [...(names || []), ...Object.keys(series).filter((n) => !(names || []).includes(n)).sort()]
      : names.filter((n) => n in series);
    if (pick) seriesNames = seriesNames.filter(pick);
    const data = align(seriesNames.map((n) => series[n]));
    const points = data.slice(1).reduce((sum, column) => sum + column.filter((v) => v !== null).length, 0);
    element.dataset.points = String(points);
    element.dataset.drawn = seriesNames.join(",");
    empty.hidden = points > 0;
    plotBox.hidden = points === 0;
    if (typeof window.uPlot !== "function") {
      empty.hidden = false;
      empty.textContent = "The chart library (static/vendor/uPlot.iife.min.js) did not load.";
      return;
    }
    if (!plot || seriesNames.join(",") !== shown.join(",")) {
      shown = seriesNames;
      build(seriesNames, data);
    } else {
      plot.setData(data);
    }
  }

  async function load() {
    const params = { minutes };
    if (names) params.series = names.join(",");
    if (prefix) params.prefix = prefix;
    update(await get(`history${query(params)}`));
  }

  return { element, update, load };
}

const plots = new Map();

addEventListener("resize", () => {
  for (const [plot, box] of plots) {
    if (!plot.root.isConnected) plots.delete(plot);
    else plot.setSize({ width: Math.max(320, box.clientWidth - 16), height: 190 });
  }
});
