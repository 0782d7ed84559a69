/* charts_pareto.js - the Pareto front of a study with several objectives
 * (ECharts options):
 *   Charts.pareto(trials, frontIds, objectives, constraints): every
 *     complete trial with values, x = the first objective, y = the second;
 *     front members (GET /best: feasible, non-dominated) red and joined
 *     in order of x, other feasible trials blue, infeasible ones (a
 *     constraint's metric beyond its bound) grey. With 3 or more
 *     objectives, the third colours the feasible points (a visual map);
 *     infeasible stay grey.
 */
"use strict";

Object.assign(Charts, {
  /* how far a trial's metrics lie beyond the constraints' bounds (0: feasible) */
  violation(t, constraints) {
    let v = 0;
    for (const c of constraints || []) {
      const m = t.metrics && t.metrics[c.metric];
      if (typeof m !== "number") return Infinity;
      if (typeof c.max === "number" && m > c.max) v += m - c.max;
      if (typeof c.min === "number" && m < c.min) v += c.min - m;
    }
    return v;
  },

  pareto(trials, frontIds, objectives, constraints) {
    const front = new Set(frontIds);
    const three = objectives.length >= 3;
    const label = (i) => `${objectives[i].metric} (${objectives[i].direction === "maximize" ? "max" : "min"})`;
    const pts = trials.filter((t) => t && t.state === "complete" && Array.isArray(t.values) && t.values.length >= 2);
    const row = (t) => [t.values[0], t.values[1], three ? t.values[2] : 0, t.number, t.trial_id];
    const infeasible = pts.filter((t) => Charts.violation(t, constraints) > 0), ruledOut = new Set(infeasible);
    const onFront = pts.filter((t) => front.has(t.trial_id)).sort((a, b) => a.values[0] - b.values[0]);
    const rest = pts.filter((t) => !front.has(t.trial_id) && !ruledOut.has(t));
    const zs = pts.filter((t) => !ruledOut.has(t)).map((t) => (three ? t.values[2] : 0));
    const [zlo, zhi] = extent(zs);
    const series = [
      { name: "Pareto front", type: "scatter", symbolSize: 11, data: onFront.map(row), itemStyle: { color: "#d62728", borderColor: "#000", borderWidth: 1 }, z: 3 },
      { name: "dominated", type: "scatter", symbolSize: 7, data: rest.map(row), itemStyle: { color: "#1f77b4", opacity: 0.75 } },
      { name: "infeasible", type: "scatter", symbolSize: 6, data: infeasible.map(row), itemStyle: { color: "#bbbbbb", opacity: 0.8 } },
    ];
    if (!three && onFront.length > 1)
      series.push({ name: "front line", type: "line", step: false, data: onFront.map(row), showSymbol: false, lineStyle: { color: "#d62728", width: 1, type: "dashed" }, silent: true, z: 2 });
    return {
      animation: false,
      grid: { left: 80, right: three ? 100 : 30, top: 40, bottom: 50 },
      legend: { top: 4, data: ["Pareto front", "dominated", "infeasible"] },
      tooltip: { trigger: "item", formatter: (p) => `trial ${p.data[3]} (${p.seriesName})<br>` +
        objectives.slice(0, three ? 3 : 2).map((o, i) => `${esc(o.metric)}: ${fmt(p.data[i], 4)}`).join("<br>") },
      xAxis: { type: "value", name: label(0), scale: true, nameLocation: "middle", nameGap: 28 },
      yAxis: { type: "value", name: label(1), scale: true, nameLocation: "middle", nameGap: 56 },
      visualMap: three && zs.length ? [{ type: "continuous", dimension: 2, seriesIndex: [0, 1], min: zlo, max: zhi,
        right: 10, top: "middle", text: [objectives[2].metric, ""], calculable: true, inRange: { color: ["#2c7bb6", "#ffffbf", "#d7191c"] } }] : undefined,
      series,
    };
  },
});
