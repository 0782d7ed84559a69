/* charts_trials.js - the trials as a whole (ECharts options):
 *   Charts.edf: the empirical distribution function of the complete trials'
 *     objective values (the share of trials at or below each value);
 *   Charts.timeline: one row per worker slot (or "ask/tell client" for an
 *     external study's trials, which have none), a bar per trial from its
 *     start to its end (now while it runs), coloured by state; the x axis
 *     counts seconds from the first trial's start (the tooltip tells the
 *     clock times).
 *   Charts.lineage: population-based training's family tree: a row per
 *     trial (each bred trial just below its parent), a bar over the epochs
 *     it trained (from its parent's epoch for a bred one, to its last
 *     reported epoch), coloured by state, and a dashed edge from the parent
 *     at the epoch of the copy; the tooltip tells the params it changed.
 */
"use strict";

const EXTERNAL_SLOT = "ask/tell client";

Object.assign(Charts, {
  edf(trials, maximize) {
    const values = trials.filter((t) => t && t.state === "complete" && typeof t.value === "number").map((t) => t.value).sort((a, b) => a - b);
    const n = values.length;
    return {
      animation: false,
      grid: { left: 70, right: 30, top: 30, bottom: 50 },
      tooltip: { trigger: "axis", formatter: (ps) => { const p = ps[0]; return `objective ≤ ${fmt(p.data[0])}: ${(p.data[1] * 100).toFixed(1)}% of ${n} trials`; } },
      xAxis: { type: "value", name: `objective (${maximize ? "higher" : "lower"} is better)`, scale: true, nameLocation: "middle", nameGap: 28 },
      yAxis: { type: "value", name: "cumulative share of trials", min: 0, max: 1, nameLocation: "middle", nameGap: 46,
        axisLabel: { formatter: (v) => `${Math.round(v * 100)}%` } },
      series: [{ name: "EDF", type: "line", step: "end", showSymbol: n <= 200, symbolSize: 4,
        data: values.map((v, i) => [v, (i + 1) / n]), lineStyle: { width: 2 } }],
    };
  },

  lineage(trials, maximize) {
    const ts = trials.filter(Boolean);
    const kids = new Map();
    for (const t of ts) {
      const p = t.lineage ? t.lineage.parent_trial_id : null;
      if (!kids.has(p)) kids.set(p, []);
      kids.get(p).push(t);
    }
    /* depth first: the sampled members, each followed by what was bred from it */
    const order = [], seen = new Set();
    const visit = (t) => {
      if (seen.has(t.trial_id)) return;
      seen.add(t.trial_id);
      order.push(t);
      for (const k of kids.get(t.trial_id) || []) visit(k);
    };
    for (const t of ts) if (!t.lineage || !ts.some((p) => p.trial_id === t.lineage.parent_trial_id)) visit(t);
    for (const t of ts) visit(t);
    const label = (t) => `#${t.number}`;
    const row = new Map(order.map((t, i) => [t.trial_id, i]));
    const byState = {};
    for (const t of order) {
      const from = t.lineage ? t.lineage.parent_epoch : 0;
      const to = t.last_step === null || t.last_step === undefined ? from : t.last_step;
      (byState[t.state] = byState[t.state] || []).push({ value: [row.get(t.trial_id), from, to, t.number, t.value] });
    }
    const edges = ts.filter((t) => t.lineage && row.has(t.lineage.parent_trial_id)).map((t) => {
      const changed = Object.keys(t.lineage.params_after || {}).filter((k) => t.lineage.params_before[k] !== t.lineage.params_after[k]);
      return { coords: [[t.lineage.parent_epoch, row.get(t.lineage.parent_trial_id)], [t.lineage.parent_epoch, row.get(t.trial_id)]],
        child: t.number, parent: t.lineage.parent_number, epoch: t.lineage.parent_epoch,
        changed: changed.map((k) => `${esc(k)}: ${esc(fmt(t.lineage.params_before[k], 4))} → ${esc(fmt(t.lineage.params_after[k], 4))}`) };
    });
    const renderBar = (params, api) => {
      const y = api.value(0);
      const a = api.coord([api.value(1), y]), b = api.coord([api.value(2), y]);
      const height = Math.min(16, api.size([0, 1])[1] * 0.5);
      return { type: "rect", shape: { x: a[0], y: a[1] - height / 2, width: Math.max(3, b[0] - a[0]), height }, style: api.style() };
    };
    const maxEpoch = Math.max(1, ...order.map((t) => t.last_step || 0));
    return {
      animation: false,
      grid: { left: 70, right: 30, top: 40, bottom: 50 },
      legend: { top: 4 },
      tooltip: { trigger: "item", formatter: (p) => (p.seriesName === "copied from"
        ? `#${p.data.child} bred from #${p.data.parent} at epoch ${p.data.epoch}` + (p.data.changed.length ? `<br>${p.data.changed.join("<br>")}` : "")
        : `trial ${p.data.value[3]} (${p.seriesName}): epochs ${p.data.value[1]}–${p.data.value[2]}` +
          (typeof p.data.value[4] === "number" ? `<br>objective: ${fmt(p.data.value[4])}` : "")) },
      xAxis: { type: "value", min: 0, max: maxEpoch, name: "epoch", nameLocation: "middle", nameGap: 26, minInterval: 1 },
      yAxis: { type: "category", data: order.map(label), inverse: true },
      series: [
        ...Object.entries(byState).map(([state, data]) => ({
          name: state, type: "custom", renderItem: renderBar, data, encode: { x: [1, 2], y: 0 },
          itemStyle: { color: STATE_COLORS[state] || "#888", opacity: 0.9 },
        })),
        { name: "copied from", type: "lines", coordinateSystem: "cartesian2d", data: edges, z: 5,
          lineStyle: { type: "dashed", width: 2, color: "#e5484d" }, symbol: ["circle", "arrow"], symbolSize: 8 },
      ],
    };
  },

  /* now: seconds since the epoch, the end of running trials' bars */
  timeline(trials, now) {
    const ran = trials.filter((t) => t && t.state !== "queued" && t.started);
    const slotOf = (t) => t.slot || EXTERNAL_SLOT;
    const slots = [...new Set(ran.map(slotOf))].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
    const row = new Map(slots.map((s, i) => [s, i]));
    const [t0] = extent(ran.map((t) => t.started));
    const byState = {};
    for (const t of ran) {
      const end = t.finished || (t.state === "running" ? now : t.started);
      (byState[t.state] = byState[t.state] || []).push([row.get(slotOf(t)), t.started - t0, Math.max(end, t.started) - t0, t.number, t.value]);
    }
    const clock = (s) => new Date((t0 + s) * 1000).toLocaleTimeString();
    const renderBar = (params, api) => {
      const y = api.value(0);
      const a = api.coord([api.value(1), y]), b = api.coord([api.value(2), y]);
      const height = Math.min(28, api.size([0, 1])[1] * 0.6);
      const cs = params.coordSys;
      const shape = echarts.graphic.clipRectByRect({ x: a[0], y: a[1] - height / 2, width: Math.max(2, b[0] - a[0]), height },
        { x: cs.x, y: cs.y, width: cs.width, height: cs.height });
      return shape && { type: "rect", shape, style: api.style() };
    };
    return {
      animation: false,
      grid: { left: 110, right: 30, top: 40, bottom: 84 },
      legend: { top: 4 },
      tooltip: { trigger: "item", formatter: (p) => `trial ${p.data[3]} (${p.seriesName})<br>${esc(slots[p.data[0]])}<br>` +
        `${clock(p.data[1])} – ${clock(p.data[2])} (${dur(p.data[2] - p.data[1])})` +
        (typeof p.data[4] === "number" ? `<br>objective: ${fmt(p.data[4])}` : "") },
      xAxis: { type: "value", min: 0, name: ran.length ? `time since the first trial started (${clock(0)})` : "time", nameLocation: "middle", nameGap: 26,
        axisLabel: { formatter: (v) => (v < 60 ? `${+v.toPrecision(3)} s` : dur(v)) } },
      yAxis: { type: "category", data: slots, inverse: true },
      dataZoom: [{ type: "inside", filterMode: "weakFilter" }, { type: "slider", filterMode: "weakFilter", height: 18, bottom: 14 }],
      series: Object.entries(byState).map(([state, data]) => ({
        name: state, type: "custom", renderItem: renderBar, data, encode: { x: [1, 2], y: 0 },
        itemStyle: { color: STATE_COLORS[state] || "#888", opacity: 0.9 },
      })),
    };
  },
});
