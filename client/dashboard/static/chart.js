/* A small SVG line chart for the live charts page (no library: the dashboard fetches nothing).
 *
 * drawChart(container, times, series, unit): times are ms since the epoch, series maps a name
 * to one value (or null: no figure) per time. The container gets an <svg> with one path per
 * series, value and time axes, and a legend with each series' latest value. The svg carries
 * data-points (how many times) and data-latest (JSON: name -> latest value) for tests; the
 * time axis is labelled with isoTime, as the tables are. */
"use strict";

const CHART_COLORS = ["#0b6bcb", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#1098ad",
                      "#e67700", "#5c7cfa", "#495057", "#a61e4d"];
const SVG_NS = "http://www.w3.org/2000/svg";

/* The one time format of the dashboard, tables and charts alike: ISO 8601 date and 24-hour
 * time in the browser's zone, to the millisecond ("2026-11-29 14:05:09.120"). */
function isoTime(ms) {
  if (!ms || ms <= 0) return "";
  const d = new Date(ms);
  const pad = (n, w) => String(n).padStart(w || 2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
         `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

function svgEl(name, attrs, text) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function niceMax(value) {
  if (value <= 0) return 1;
  const power = Math.pow(10, Math.floor(Math.log10(value)));
  for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * power) return step * power;
  return 10 * power;
}

function formatValue(v) {
  if (v === null || v === undefined) return "–";
  if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString();
  return (Math.round(v * 100) / 100).toString();
}

function drawChart(container, times, series, unit) {
  const width = 800, height = 220, left = 60, right = 12, top = 10, bottom = 26;
  const names = Object.keys(series).sort();
  let max = 0;
  for (const name of names) for (const v of series[name]) if (v !== null && v > max) max = v;
  max = niceMax(max);
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none",
                             "data-points": times.length });
  const plotW = width - left - right, plotH = height - top - bottom;
  const x = (i) => left + (times.length <= 1 ? plotW : (i * plotW) / (times.length - 1));
  const y = (v) => top + plotH - (v / max) * plotH;
  for (const frac of [0, 0.25, 0.5, 0.75, 1]) {
    const yy = top + plotH - frac * plotH;
    svg.appendChild(svgEl("line", { x1: left, x2: width - right, y1: yy, y2: yy,
                                    class: frac === 0 ? "axis" : "grid" }));
    svg.appendChild(svgEl("text", { x: left - 6, y: yy + 4, "text-anchor": "end" },
                          formatValue(max * frac)));
  }
  svg.appendChild(svgEl("line", { x1: left, x2: left, y1: top, y2: top + plotH, class: "axis" }));
  if (times.length > 0) {
    const label = isoTime;
    svg.appendChild(svgEl("text", { x: left, y: height - 6 }, label(times[0])));
    svg.appendChild(svgEl("text", { x: width - right, y: height - 6, "text-anchor": "end" },
                          label(times[times.length - 1])));
  }
  svg.appendChild(svgEl("text", { x: left + 4, y: top + 12 }, unit));
  const latest = {};
  names.forEach((name, index) => {
    const values = series[name];
    let d = "", pen = false;
    values.forEach((v, i) => {
      if (v === null) { pen = false; return; }
      d += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)} `;
      pen = true;
    });
    const lone = values.filter((v) => v !== null).length === 1;
    const color = CHART_COLORS[index % CHART_COLORS.length];
    if (d) svg.appendChild(svgEl("path", { d, class: "series", stroke: color,
                                           "stroke-linecap": "round",
                                           "stroke-width": lone ? 6 : 2, "data-series": name }));
    const last = [...values].reverse().find((v) => v !== null);
    latest[name] = last === undefined ? null : last;
  });
  svg.setAttribute("data-latest", JSON.stringify(latest));
  const legend = document.createElement("div");
  legend.className = "legend";
  names.forEach((name, index) => {
    const item = document.createElement("span");
    const swatch = document.createElement("i");
    swatch.style.background = CHART_COLORS[index % CHART_COLORS.length];
    item.appendChild(swatch);
    item.appendChild(document.createTextNode(`${name}: ${formatValue(latest[name])}`));
    legend.appendChild(item);
  });
  if (names.length === 0) {
    legend.appendChild(document.createTextNode("no series yet"));
  }
  container.replaceChildren(svg, legend);
}
