/* charts_params.js - the objective over the search space (ECharts options):
 *   Charts.contour: over two parameters, an interpolated surface with the
 *     trials on top;
 *   Charts.slice: against one parameter, points coloured by trial number.
 *
 * Axes follow the parameter's type in the study's space: a log axis for a
 * log-scaled number, a category axis for a choice or a bool, a value axis
 * otherwise. The contour's surface is an inverse-distance-weighted
 * interpolation of the complete trials' values on a CELLS x CELLS grid
 * (one cell per category on a category axis), computed in the axis' own
 * scale (log10 for log axes) normalised to [0, 1]; the trials themselves are
 * drawn over it. ECharts' heatmap needs two category axes, so the cells are
 * a custom series of rectangles placed by the real axes.
 */
"use strict";

const CONTOUR_CELLS = 40;

const ParamAxis = {
  isCat(p) { return p.type === "choice" || p.type === "bool"; },
  cats(p) { return p.type === "bool" ? ["false", "true"] : (p.values || []).map(String); },
  /* {cat, cats} or {log, lo, hi} with lo/hi in the axis' scale (log10 for log) */
  scale(p, values) {
    if (ParamAxis.isCat(p)) return { cat: true, cats: ParamAxis.cats(p) };
    const log = !!p.log;
    const tr = (v) => (log ? Math.log10(v) : v);
    const [vlo, vhi] = extent(values);
    let lo = typeof p.low === "number" ? p.low : vlo;
    let hi = typeof p.high === "number" ? p.high : vhi;
    if (!(hi > lo)) hi = lo + 1;
    return { cat: false, log, lo: tr(lo), hi: tr(hi), tr, inv: (u) => (log ? 10 ** u : u) };
  },
  /* the value as placed on the axis: a category's index, else the number */
  place(s, v) { return s.cat ? s.cats.indexOf(String(v)) : v; },
  /* the value in [0, 1] along the axis */
  unit(s, v) {
    if (s.cat) return s.cats.length > 1 ? s.cats.indexOf(String(v)) / (s.cats.length - 1) : 0.5;
    return (s.tr(v) - s.lo) / (s.hi - s.lo);
  },
  axis(s, name, extra = {}) {
    const base = { name, nameLocation: "middle", nameGap: 28, ...extra };
    if (s.cat) return { ...base, type: "category", data: s.cats };
    return { ...base, type: s.log ? "log" : "value", min: s.inv(s.lo), max: s.inv(s.hi),
      axisLabel: { formatter: (v) => fmt(v, 3) } };
  },
};

/* sequential colours, light to strong, readable on the theme's background */
function seqColors() {
  return Charts.theme === "dark" ? ["#24407f", "#4f7fe0", "#d6e4ff"] : ["#c6d4f5", "#2f6fdf", "#0b2b7a"];
}

function completeWith(trials, names) {
  return trials.filter((t) => t && t.state === "complete" && typeof t.value === "number" && t.params &&
    names.every((n) => t.params[n] !== undefined && t.params[n] !== null));
}

Object.assign(Charts, {
  /* The objective over parameters xName and yName of the space. */
  contour(space, trials, xName, yName, maximize) {
    const px = space[xName], py = space[yName];
    const pts = completeWith(trials, [xName, yName]).filter((t) =>
      (!ParamAxis.isCat(px) || ParamAxis.cats(px).includes(String(t.params[xName]))) &&
      (!ParamAxis.isCat(py) || ParamAxis.cats(py).includes(String(t.params[yName]))));
    const sx = ParamAxis.scale(px, pts.map((t) => t.params[xName]));
    const sy = ParamAxis.scale(py, pts.map((t) => t.params[yName]));
    const known = pts.map((t) => [ParamAxis.unit(sx, t.params[xName]), ParamAxis.unit(sy, t.params[yName]), t.value]);
    /* cells along one axis: [centre as placed, unit position, low edge, high edge] */
    const cellsOf = (s) => {
      if (s.cat) return s.cats.map((c, i) => [i, s.cats.length > 1 ? i / (s.cats.length - 1) : 0.5, null, null]);
      const out = [];
      for (let k = 0; k < CONTOUR_CELLS; k++) {
        const a = s.lo + ((s.hi - s.lo) * k) / CONTOUR_CELLS, b = s.lo + ((s.hi - s.lo) * (k + 1)) / CONTOUR_CELLS;
        out.push([s.inv((a + b) / 2), (k + 0.5) / CONTOUR_CELLS, s.inv(a), s.inv(b)]);
      }
      return out;
    };
    const surface = [];
    if (known.length >= 3) {
      const cx = cellsOf(sx), cy = cellsOf(sy);
      for (const [xc, ux, x0, x1] of cx) {
        for (const [yc, uy, y0, y1] of cy) {
          let num = 0, den = 0, exact = null;
          for (const [kx, ky, v] of known) {
            const d2 = (kx - ux) ** 2 + (ky - uy) ** 2;
            if (d2 < 1e-12) { exact = v; break; }
            num += v / d2;
            den += 1 / d2;
          }
          surface.push([xc, yc, exact !== null ? exact : num / den, x0, x1, y0, y1]);
        }
      }
    }
    const values = pts.map((t) => t.value);
    const [lo, hi] = extent(values);
    const colors = seqColors();
    /* one cell: the numeric edges, or a category's band */
    const renderCell = (params, api) => {
      const c = api.coord([api.value(0), api.value(1)]);
      const band = sx.cat || sy.cat ? api.size([1, 1]) : null; /* a category's width and height */
      const [xa, xb] = sx.cat ? [c[0] - band[0] / 2, c[0] + band[0] / 2]
        : [api.coord([api.value(3), api.value(1)])[0], api.coord([api.value(4), api.value(1)])[0]];
      const [ya, yb] = sy.cat ? [c[1] - band[1] / 2, c[1] + band[1] / 2]
        : [api.coord([api.value(0), api.value(5)])[1], api.coord([api.value(0), api.value(6)])[1]];
      return { type: "rect", shape: { x: Math.min(xa, xb), y: Math.min(ya, yb), width: Math.abs(xb - xa) + 0.5, height: Math.abs(yb - ya) + 0.5 },
        style: { fill: api.visual("color") } };
    };
    return {
      animation: false,
      grid: { left: 70, right: 110, top: 20, bottom: 50 },
      tooltip: { trigger: "item" },
      xAxis: ParamAxis.axis(sx, xName, { splitLine: { show: false } }),
      yAxis: ParamAxis.axis(sy, yName, { nameGap: 50, splitLine: { show: false } }),
      visualMap: {
        type: "continuous", seriesIndex: 0, dimension: 2, min: lo, max: hi === lo ? lo + 1 : hi, calculable: false,
        right: 10, top: "middle", itemHeight: 160, itemWidth: 12, text: [fmt(hi, 3), fmt(lo, 3)], textGap: 6,
        inRange: { color: maximize ? colors : colors.slice().reverse() },
      },
      series: [
        { name: "interpolated objective", type: "custom", renderItem: renderCell, data: surface, silent: true,
          encode: { x: 0, y: 1 }, z: 1 },
        { name: "trials", type: "scatter", z: 3, symbolSize: 7,
          data: pts.map((t) => [ParamAxis.place(sx, t.params[xName]), ParamAxis.place(sy, t.params[yName]), t.value, t.number]),
          itemStyle: { color: Charts.theme === "dark" ? "#111" : "#fff", borderColor: Charts.ink(), borderWidth: 1.2 },
          tooltip: { formatter: (p) => `trial ${p.data[3]}<br>${esc(xName)}: ${esc(fmt(pts[p.dataIndex].params[xName], 4))}<br>` +
            `${esc(yName)}: ${esc(fmt(pts[p.dataIndex].params[yName], 4))}<br>objective: ${fmt(p.data[2])}` } },
      ],
    };
  },

  /* The objective against parameter `name` (p: its space entry); points
   * coloured by trial number, 0 to lastNumber. */
  slice(name, p, trials, lastNumber) {
    const pts = completeWith(trials, [name]).filter((t) => !ParamAxis.isCat(p) || ParamAxis.cats(p).includes(String(t.params[name])));
    const s = ParamAxis.scale(p, pts.map((t) => t.params[name]));
    return {
      animation: false,
      grid: { left: 58, right: 14, top: 14, bottom: 44 },
      tooltip: { trigger: "item", formatter: (q) => `trial ${q.data[2]}<br>${esc(name)}: ${esc(fmt(pts[q.dataIndex].params[name], 4))}<br>objective: ${fmt(q.data[1])}` },
      xAxis: ParamAxis.axis(s, name, { nameGap: 26 }),
      yAxis: { type: "value", name: "objective", scale: true, nameLocation: "middle", nameGap: 42 },
      visualMap: { show: false, type: "continuous", dimension: 2, min: 0, max: Math.max(1, lastNumber), inRange: { color: seqColors() } },
      series: [{ name, type: "scatter", symbolSize: 6, data: pts.map((t) => [ParamAxis.place(s, t.params[name]), t.value, t.number]),
        itemStyle: { opacity: 0.85 } }],
    };
  },
});
