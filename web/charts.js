/* charts.js - ECharts options for the study page: optimisation history,
 * learning curves, parallel coordinates, hyperparameter importance, models
 * (charts_params.js: contour and slice; charts_trials.js: EDF, timeline).
 *
 * Every chart goes through Charts.show(name, el, option), which keeps the
 * instance in Charts.all (the browser test reads their options from there)
 * and reuses it on updates (setOption with notMerge, no re-init). Large
 * studies: the history scatter switches to ECharts' "large" mode, and the
 * parallel plot draws at most PARALLEL_MAX trials (the best and a spread of
 * the rest) with progressive rendering.
 */
"use strict";

const STATE_COLORS = {
  complete: "#2f6fdf", pruned: "#e8871e", failed: "#d33f49", running: "#2aa876",
  cancelled: "#8a8f98", queued: "#b0b4bb",
};
const PARALLEL_MAX = 1000;

function fmt(v, digits = 5) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e9) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(digits - 2);
  return String(Number(v.toPrecision(digits)));
}

/* text for ECharts' tooltip formatters, which take HTML: names and values
 * come from clients (a choice value, a metric's name) and must show as text */
function esc(v) {
  return String(v).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

/* [lo, hi] of the numbers in values by a loop ([dlo, dhi] when there are
 * none): Math.min(...values) throws a RangeError past about 100,000
 * arguments, a long study's trials. */
function extent(values, dlo = 0, dhi = 1) {
  if (!values.length) return [dlo, dhi];
  let lo = Infinity, hi = -Infinity;
  for (const v of values) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return [lo, hi];
}

const Charts = {
  all: {},
  available: typeof window.echarts !== "undefined",

  theme: "light",

  show(name, el, option) {
    if (!Charts.available) {
      el.innerHTML = '<p class="muted">Charts are unavailable: this hpod was built without ECharts (run <code>npm ci</code> in web/ and rebuild).</p>';
      return null;
    }
    let c = Charts.all[name];
    if (!c || c.isDisposed() || c.getDom() !== el || c.hpoTheme !== Charts.theme) {
      if (c) Charts.dispose(c);
      c = echarts.init(el, Charts.theme === "dark" ? "dark" : null, { renderer: "canvas" });
      c.hpoTheme = Charts.theme;
      Charts.all[name] = c;
    }
    c.setOption({ backgroundColor: "transparent", ...option }, { notMerge: true, lazyUpdate: false });
    return c;
  },

  /* "light" or "dark": charts drawn from now on use it; the pages redraw
   * theirs on the "hpo-theme" event (app.js). */
  setTheme(t) {
    if (t === Charts.theme) return;
    Charts.theme = t;
    window.dispatchEvent(new Event("hpo-theme"));
  },
  /* the colour of lines that must stand out from the background */
  ink() { return Charts.theme === "dark" ? "#e8eaf0" : "#111"; },

  /* A large series is painted over several frames (progressive rendering),
   * and a frame that comes after dispose() throws (ECharts' painter is gone:
   * "reading 'layerStack'"); painting the chart empty first ends that paint. */
  dispose(c) {
    if (c.isDisposed()) return;
    c.clear();
    c.getZr().refreshImmediately();
    c.dispose();
  },

  disposeAll() {
    for (const c of Object.values(Charts.all)) Charts.dispose(c);
    Charts.all = {};
  },

  resize() { for (const c of Object.values(Charts.all)) if (!c.isDisposed()) c.resize(); },

  /* Objective per trial (by state) and the best-so-far line over complete trials. */
  history(trials, maximize) {
    const byState = {};
    const best = [];
    let cur = null;
    for (const t of trials) {
      if (!t) continue;
      if (t.value !== null && t.value !== undefined && (t.state === "complete" || t.state === "pruned")) {
        (byState[t.state] = byState[t.state] || []).push([t.number, t.value, t.trial_id]);
      }
      if (t.state === "complete" && t.value !== null) {
        if (cur === null || (maximize ? t.value > cur : t.value < cur)) cur = t.value;
        best.push([t.number, cur]);
      }
    }
    const large = trials.length > 2000;
    const series = Object.entries(byState).map(([state, data]) => ({
      name: state === "pruned" ? "pruned (last value)" : state,
      type: "scatter", data, symbolSize: large ? 3 : 6, large, largeThreshold: 2000,
      itemStyle: { color: STATE_COLORS[state], opacity: state === "pruned" ? 0.6 : 0.85 },
    }));
    series.push({
      name: "best so far", type: "line", step: "end", data: best, showSymbol: false,
      lineStyle: { width: 2, color: Charts.ink() }, itemStyle: { color: Charts.ink() }, z: 5,
    });
    return {
      animation: !large,
      grid: { left: 60, right: 20, top: 36, bottom: 40 },
      legend: { top: 4 },
      tooltip: { trigger: "item", formatter: (p) => `trial ${p.data[0]}<br>${esc(p.seriesName)}: ${fmt(p.data[1])}` },
      xAxis: { type: "value", name: "trial", nameLocation: "middle", nameGap: 24, min: 0 },
      yAxis: { type: "value", name: "objective", scale: true, nameLocation: "middle", nameGap: 44 },
      dataZoom: [{ type: "inside" }],
      series,
    };
  },

  /* Intermediate values per step of the chosen trials; a pruned trial's
   * line is dashed and ends in a cross where it was stopped. */
  curves(trials) {
    const series = trials.map((t) => {
      const data = (t.intermediate || []).map((p) => [p.step, p.value]);
      const pruned = t.state === "pruned";
      const s = {
        name: `#${t.number} ${t.state}`, type: "line", data, showSymbol: data.length < 40, symbolSize: 4,
        lineStyle: { type: pruned ? "dashed" : "solid", width: pruned ? 1.5 : 2 },
        emphasis: { focus: "series" },
      };
      if (pruned && data.length) {
        s.markPoint = {
          symbol: "path://M0,0 L10,10 M10,0 L0,10", symbolSize: 10, silent: true,
          itemStyle: { borderColor: STATE_COLORS.pruned, borderWidth: 2, color: "none" },
          label: { show: false },
          data: [{ coord: data[data.length - 1], name: "pruned" }],
        };
      }
      return s;
    });
    return {
      animation: false,
      grid: { left: 60, right: 20, top: 48, bottom: 40 },
      legend: { top: 4, type: "scroll" },
      tooltip: { trigger: "axis" },
      xAxis: { type: "value", name: "step", nameLocation: "middle", nameGap: 24, minInterval: 1, min: "dataMin" },
      yAxis: { type: "value", name: "intermediate value", scale: true, nameLocation: "middle", nameGap: 44 },
      series,
    };
  },

  /* One axis per parameter of the space plus the objective; lines coloured
   * by the objective (best bright). */
  parallel(space, trials, maximize) {
    const names = Object.keys(space || {});
    let done = trials.filter((t) => t && t.state === "complete" && t.value !== null);
    const total = done.length;
    if (done.length > PARALLEL_MAX) {
      /* the best tenth, then an even spread of the rest */
      const sorted = done.slice().sort((a, b) => (maximize ? b.value - a.value : a.value - b.value));
      const top = sorted.slice(0, PARALLEL_MAX / 10);
      const rest = sorted.slice(PARALLEL_MAX / 10);
      const step = rest.length / (PARALLEL_MAX - top.length);
      const spread = [];
      for (let i = 0; i < PARALLEL_MAX - top.length; i++) spread.push(rest[Math.floor(i * step)]);
      done = top.concat(spread);
    }
    const axes = names.map((n, i) => {
      const p = space[n];
      const ax = { dim: i, name: n, nameTextStyle: { fontSize: 11 } };
      if (p.type === "choice" || p.type === "bool") {
        const cats = p.type === "bool" ? ["false", "true"] : p.values.map(String);
        if (p.condition) cats.push("inactive");
        Object.assign(ax, { type: "category", data: cats });
      } else {
        Object.assign(ax, { type: p.log ? "log" : "value", min: p.low, max: p.high });
      }
      return ax;
    });
    axes.push({ dim: names.length, name: "objective", type: "value", scale: true, nameTextStyle: { fontWeight: "bold" } });
    const data = done.map((t) => {
      const row = names.map((n) => {
        const p = space[n];
        const v = t.params ? t.params[n] : undefined;
        if (p.type === "choice" || p.type === "bool") return v === undefined ? "inactive" : String(v);
        return v === undefined ? "-" : v;
      });
      row.push(t.value);
      return row;
    });
    const values = done.map((t) => t.value);
    const [lo, hi] = extent(values);
    return {
      animation: false,
      title: total > done.length ? { text: `${done.length} of ${total} complete trials (the best ${PARALLEL_MAX / 10} and a spread)`, textStyle: { fontSize: 11, fontWeight: "normal", color: "#666" }, right: 10, top: 0 } : undefined,
      parallelAxis: axes,
      parallel: { left: 50, right: 120, top: 40, bottom: 30, parallelAxisDefault: { nameLocation: "end", nameGap: 12 } },
      visualMap: {
        type: "continuous", dimension: names.length, min: lo, max: hi === lo ? lo + 1 : hi, calculable: false,
        right: 10, top: "middle", itemHeight: 120, itemWidth: 12, text: [fmt(hi, 3), fmt(lo, 3)], textGap: 6,
        inRange: { color: maximize ? seqColors() : seqColors().reverse() }, /* the best strongest */
      },
      series: [{ type: "parallel", data, lineStyle: { width: 1, opacity: 0.45 }, progressive: 500, smooth: false }],
    };
  },

  /* Validation and test figures of one metric for every finished model
   * (refits, trial models, ensembles) of a study. */
  models(models, metric) {
    const done = models.filter((m) => m.state === "complete" && m.result);
    const name = (m) => `${m.kind} ${m.id}`;
    const pick = (r, split) => (r && r[split] && typeof r[split][metric] === "number" ? r[split][metric] : null);
    return {
      animation: false,
      grid: { left: 60, right: 20, top: 36, bottom: 50 },
      legend: { top: 4 },
      tooltip: { trigger: "axis" },
      xAxis: { type: "category", data: done.map(name), axisLabel: { interval: 0, rotate: done.length > 6 ? 30 : 0 } },
      yAxis: { type: "value", name: metric, scale: true, nameLocation: "middle", nameGap: 44 },
      series: [
        { name: "validation", type: "bar", data: done.map((m) => pick(m.result, "val")), itemStyle: { color: "#9db7ef" } },
        { name: "test", type: "bar", data: done.map((m) => pick(m.result, "test")), itemStyle: { color: "#2f6fdf" },
          label: { show: true, position: "top", formatter: (p) => fmt(p.value, 4) } },
      ],
    };
  },

  /* Per-epoch metrics of an embedded trial (each execution): losses on the
   * left axis, the others (accuracy, ...) on the right; the best epoch marked.
   * An external trial's curve points (the vectors it reported on a study with
   * several objectives) show every objective they hold. */
  trainingCurves(trial) {
    const curves = trial.curves || [];
    const keys = ["loss", "val_loss", "accuracy", "val_accuracy", "mse", "val_mse"];
    const has = (k) => curves.some((c) => c.metrics && typeof c.metrics[k] === "number");
    let present = keys.filter(has);
    if (!present.length) present = [...new Set(curves.flatMap((c) => Object.keys(c.metrics || {})))].filter(has);
    const executions = [...new Set(curves.map((c) => c.execution))];
    const series = [];
    for (const e of executions) {
      for (const k of present) {
        const isLoss = k.endsWith("loss") || k.endsWith("mse");
        series.push({
          name: executions.length > 1 ? `${k} (execution ${e})` : k, type: "line", yAxisIndex: isLoss ? 0 : 1,
          data: curves.filter((c) => c.execution === e && c.metrics && typeof c.metrics[k] === "number").map((c) => [c.epoch, c.metrics[k]]),
          lineStyle: { type: k.startsWith("val_") ? "solid" : "dashed" }, showSymbol: true, symbolSize: 4,
        });
      }
    }
    if (series.length && trial.best_epoch) {
      series[0].markLine = { silent: true, symbol: "none", lineStyle: { color: "#2aa876" },
        label: { formatter: "best epoch" }, data: [{ xAxis: trial.best_epoch }] };
    }
    return {
      animation: false,
      grid: { left: 60, right: 60, top: 48, bottom: 40 },
      legend: { top: 4, type: "scroll" },
      tooltip: { trigger: "axis" },
      xAxis: { type: "value", name: "epoch", nameLocation: "middle", nameGap: 24, minInterval: 1, min: "dataMin" },
      yAxis: [{ type: "value", name: "loss", scale: true }, { type: "value", name: "metric", scale: true }],
      series,
    };
  },

  importance(result) {
    const items = (result.importance || []).slice().reverse(); /* most important on top */
    return {
      animation: false,
      grid: { left: 110, right: 40, top: 10, bottom: 30 },
      tooltip: { trigger: "item", formatter: (p) => `${esc(p.name)}: ${(p.value * 100).toFixed(1)}%` },
      xAxis: { type: "value", max: 1, axisLabel: { formatter: (v) => `${Math.round(v * 100)}%` } },
      yAxis: { type: "category", data: items.map((i) => i.param) },
      series: [{
        type: "bar", data: items.map((i) => i.importance), itemStyle: { color: "#2f6fdf" },
        label: { show: true, position: "right", formatter: (p) => `${(p.value * 100).toFixed(0)}%` },
      }],
    };
  },
};

window.Charts = Charts; /* the browser test reads the charts from here */
window.addEventListener("resize", () => Charts.resize());
