// views.mjs - the dashboard's analysis views, downloads, study actions,
// token prompt, dark theme and a template-only study, checked in the
// browser; called by dashboard.mjs with {ctx, page, cfg, check, shot}.
// Every check compares what a chart or table shows with what the API says.
import fs from "node:fs";

/* the API's answers, asked beside the page (its console stays clean of
 * the 404 a deleted study answers) */
const apiGet = async (page, url) => {
  const r = await page.request.get(url);
  return r.status() === 200 ? r.json() : { status: r.status() };
};
const apiTrials = async (page, base, sid) => (await apiGet(page, `${base}/api/v1/studies/${sid}/trials?order=number&limit=100000`)).trials;
const apiStudy = (page, base, sid) => apiGet(page, `${base}/api/v1/studies/${sid}`);
/* the option of chart `name` as the page holds it (functions dropped) */
const option = (page, name) => page.evaluate((n) => {
  const c = window.Charts.all[n];
  if (!c || c.isDisposed()) return null;
  const o = c.getOption();
  return {
    darkMode: o.darkMode === true, /* "auto" unless the dark theme is on */
    x: o.xAxis && o.xAxis[0] && { type: o.xAxis[0].type, data: o.xAxis[0].data, name: o.xAxis[0].name },
    y: o.yAxis && o.yAxis[0] && { type: o.yAxis[0].type, data: o.yAxis[0].data },
    series: o.series.map((s) => ({ type: s.type, name: s.name, data: s.data })),
    axes: (o.parallelAxis || []).map((a) => ({ name: a.name, type: a.type, data: a.data })),
  };
}, name);
const drawn = (page, view, timeout = 15000) =>
  page.waitForFunction((v) => window.__hpo && window.__hpo.view === v && window.__hpo.drawn > 0, view, { timeout });
const complete = (trials) => trials.filter((t) => t.state === "complete" && typeof t.value === "number");
const has = (t, ...names) => names.every((n) => t.params && t.params[n] !== undefined);

export async function analysisViews({ page, cfg, check, shot }) {
  const sid = cfg.finished;
  const trials = await apiTrials(page, cfg.url, sid);
  const done = complete(trials);

  // ---- contour: lr (log) x units, then a choice on y, then a conditional one
  await page.goto(`${cfg.url}/#/studies/${sid}/contour`);
  await drawn(page, "contour");
  let o = await option(page, "contour");
  check(o && o.series[1].data.length === done.length && o.series[0].data.length === 40 * 40 && o.x.type === "log" && o.y.type === "value",
    `contour lr x units: ${o && o.series[1].data.length} trial dots (want ${done.length}), ${o && o.series[0].data.length} cells, a log x axis`);
  await shot("view-contour.png");
  await page.selectOption("#contour-y", "optimizer");
  await page.waitForFunction(() => window.Charts.all.contour.getOption().yAxis[0].type === "category");
  o = await option(page, "contour");
  check(o.series[0].data.length === 40 * 3 && JSON.stringify(o.y.data) === '["adam","sgd","rmsprop"]' && o.series[1].data.length === done.length,
    `contour lr x optimizer: a category axis of the 3 choices, 40 x 3 cells (${o.series[0].data.length})`);
  await page.selectOption("#contour-x", "momentum");
  await page.waitForFunction(() => window.Charts.all.contour.getOption().xAxis[0].name === "momentum");
  o = await option(page, "contour");
  const sgd = done.filter((t) => has(t, "momentum")).length;
  check(o.series[1].data.length === sgd, `contour momentum x optimizer: only the ${sgd} trials where momentum is active (${o.series[1].data.length})`);

  // ---- slice: one chart per parameter, points coloured by trial number
  await page.goto(`${cfg.url}/#/studies/${sid}/slice`);
  await drawn(page, "slice");
  const params = await page.$$eval("#slices .chart", (els) => els.map((e) => e.dataset.param));
  check(params.join() === "lr,units,optimizer,momentum,dropout", `slice: one chart per parameter (${params})`);
  let sliceOk = true;
  for (const p of params) {
    const so = await option(page, `slice:${p}`);
    const want = done.filter((t) => has(t, p)).length;
    const axisOk = p === "lr" ? so.x.type === "log" : p === "optimizer" ? so.x.type === "category" : so.x.type === "value";
    const numbersOk = so.series[0].data.every((d) => done.some((t) => t.number === d[2] && t.value === d[1]));
    if (so.series[0].data.length !== want || !axisOk || !numbersOk) { sliceOk = false; console.log(`  slice ${p}: ${so.series[0].data.length} points (want ${want}), axis ${so.x.type}`); }
  }
  check(sliceOk, "slice: each chart has a point per complete trial with that parameter, on the parameter's axis type, coloured by trial number");
  await shot("view-slice.png");

  // ---- EDF
  await page.goto(`${cfg.url}/#/studies/${sid}/edf`);
  await drawn(page, "edf");
  o = await option(page, "edf");
  const edf = o.series[0].data;
  const sorted = done.map((t) => t.value).sort((a, b) => a - b);
  check(edf.length === done.length && edf.every((d, i) => d[0] === sorted[i] && Math.abs(d[1] - (i + 1) / done.length) < 1e-12),
    `EDF: ${edf.length} steps, the sorted objective values against (i+1)/n`);
  await shot("view-edf.png");

  // ---- timeline: the external study has one row (no slots), the embedded one its worker slots
  await page.goto(`${cfg.url}/#/studies/${sid}/timeline`);
  await drawn(page, "timeline");
  o = await option(page, "timeline");
  const bars = (opt) => opt.series.reduce((a, s) => a + s.data.length, 0);
  const byState = (opt) => Object.fromEntries(opt.series.map((s) => [s.name, s.data.length]));
  const want = {};
  for (const t of trials) want[t.state] = (want[t.state] || 0) + 1;
  check(bars(o) === trials.length && JSON.stringify(o.y.data) === '["ask/tell client"]' &&
    Object.entries(want).every(([s, n]) => byState(o)[s] === n),
    `timeline (external study): ${bars(o)} bars on one row, by state ${JSON.stringify(byState(o))}`);
  const emb = await apiTrials(page, cfg.url, cfg.embedded);
  await page.goto(`${cfg.url}/#/studies/${cfg.embedded}/timeline`);
  await drawn(page, "timeline");
  o = await option(page, "timeline");
  const slots = [...new Set(emb.map((t) => t.slot))].sort();
  check(bars(o) === emb.length && JSON.stringify([...o.y.data].sort()) === JSON.stringify(slots) &&
    o.series.every((s) => s.data.every((d) => emb.find((t) => t.number === d[3]).slot === o.y.data[d[0]] && d[2] >= d[1])),
    `timeline (embedded study): ${bars(o)} bars on the slots ${o.y.data} where each trial ran`);
  await shot("view-timeline.png");

  // ---- lineage (pbt): a bar per trial over its epochs, a dashed edge per copy
  const pt = await apiTrials(page, cfg.url, cfg.pbt);
  await page.goto(`${cfg.url}/#/studies/${cfg.pbt}/lineage`);
  await drawn(page, "lineage");
  o = await option(page, "lineage");
  const bred = pt.filter((t) => t.lineage);
  const edges = o.series.find((s) => s.name === "copied from").data;
  const lbars = o.series.filter((s) => s.type === "custom").reduce((a, s) => a + s.data.length, 0);
  const rowOf = (n) => o.y.data.indexOf(`#${n}`);
  check(bred.length > 0 && lbars === pt.length && edges.length === bred.length &&
    bred.every((t) => edges.some((e) => e.child === t.number && e.parent === t.lineage.parent_number && e.coords[0][0] === t.lineage.parent_epoch &&
      e.coords[0][1] === rowOf(t.lineage.parent_number) && e.coords[1][1] === rowOf(t.number) && rowOf(t.number) > rowOf(t.lineage.parent_number))),
    `lineage (pbt study): ${lbars} bars for ${pt.length} trials, ${edges.length} copy edges for ${bred.length} bred trials, each from its parent's row at the copy's epoch`);
  const barOk = o.series.filter((s) => s.type === "custom").every((s) => s.data.every((d) => {
    const t = pt.find((x) => x.number === d.value[3]);
    return d.value[1] === (t.lineage ? t.lineage.parent_epoch : 0) && d.value[2] === t.last_step && s.name === t.state;
  }));
  check(barOk, "lineage: each bar spans the epochs its trial trained (from the copy's epoch for a bred one), coloured by state");
  await shot("view-lineage.png");
  await page.goto(`${cfg.url}/#/studies/${cfg.embedded}/lineage`);
  await drawn(page, "lineage");
  check(await page.$eval("#chart-lineage", (el) => /Not a population-based study/.test(el.textContent)),
    "lineage of a study that is not pbt says so");

  // ---- compare: tick three trials in the overview's table, then "Compare ticked"
  await page.goto(`${cfg.url}/#/studies/${sid}`);
  await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
  await page.click("#untick-all");
  await page.waitForFunction(() => window.Charts.all.curves && window.Charts.all.curves.getOption().series.length === 0);
  const picks = (await page.$$eval("#trials tbody tr", (rows) => rows.filter((r) => !r.textContent.includes("failed")).slice(0, 3)
    .map((r) => r.children[1].textContent.trim()))).sort((a, b) => a - b);
  for (const n of picks) await page.click(`#trials tbody tr:has(td:nth-child(2) a:text-is("${n}")) input[type=checkbox]`);
  await page.click("#compare-ticked");
  await drawn(page, "compare");
  await page.waitForFunction(() => window.Charts.all.compare);
  const cols = await page.$$eval("#compare-table thead th a", (a) => a.map((x) => x.textContent));
  const cmp = await option(page, "compare");
  const names = cmp.series.map((s) => s.name.split(" ")[0]);
  const rowsShown = await page.$$eval("#compare-table tbody tr.param", (r) => r.map((x) => x.dataset.row));
  const lrRow = await page.$$eval('#compare-table tbody tr[data-row="lr"] td', (c) => c.map((x) => Number(x.textContent)));
  const wantLr = picks.map((n) => trials[Number(n)].params.lr);
  check(cols.join() === picks.map((n) => `#${n}`).join() && names.sort().join() === cols.slice().sort().join() &&
    cmp.series.every((s, i) => s.data.length > 0) && rowsShown.includes("lr") && rowsShown.includes("optimizer") &&
    lrRow.every((v, i) => Math.abs(v - wantLr[i]) <= 1e-5 * Math.abs(wantLr[i])),
    `compare: trials ${cols} side by side (their params) with ${cmp.series.length} learning curves overlaid`);
  await shot("view-compare.png");
}

export async function downloads({ page, cfg, check }) {
  const sid = cfg.finished;
  const trials = await apiTrials(page, cfg.url, sid);
  await page.goto(`${cfg.url}/#/studies/${sid}`);
  await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
  const fetchDownload = async (button) => {
    const [d] = await Promise.all([page.waitForEvent("download", { timeout: 10000 }), page.click(button)]);
    return { name: d.suggestedFilename(), text: fs.readFileSync(await d.path(), "utf8") };
  };
  const csv = await fetchDownload("#download-csv");
  const lines = csv.text.trimEnd().split("\r\n");
  const head = lines[0].split(",");
  const rows = lines.slice(1).map((l) => l.split(",")); /* no field of these trials needs quoting but the error text */
  const col = (name) => head.indexOf(name);
  const okRows = trials.every((t, i) => rows[i] && rows[i][col("number")] === String(t.number) && rows[i][col("state")] === t.state &&
    (t.value === null ? rows[i][col("value")] === "" : Number(rows[i][col("value")]) === t.value) &&
    (t.params.lr === undefined || Number(rows[i][col("param_lr")]) === t.params.lr) &&
    rows[i][col("param_optimizer")] === String(t.params.optimizer));
  check(csv.name.endsWith(".csv") && lines.length === trials.length + 1 && ["param_lr", "param_momentum", "state", "value"].every((c) => head.includes(c)) && okRows,
    `CSV download ${csv.name}: a header and ${lines.length - 1} rows (want ${trials.length}) with each trial's number, state, value and params`);
  const js = await fetchDownload("#download-json");
  const doc = JSON.parse(js.text);
  check(js.name.endsWith(".json") && doc.study.id === sid && doc.trials.length === trials.length &&
    doc.trials.every((t, i) => t.number === trials[i].number && t.state === trials[i].state && t.value === trials[i].value &&
      JSON.stringify(t.params) === JSON.stringify(trials[i].params)),
    `JSON download ${js.name}: ${doc.trials.length} trials with names, params, values and states`);
}

const stateBadge = (page, state) => page.waitForFunction((s) => {
  const b = document.querySelector(".summary h1 .badge");
  return b && b.textContent === s;
}, state, { timeout: 10000 });

export async function actions({ page, cfg, check, shot }) {
  // ---- no token: pause, resume, cancel (dismissed, then confirmed), delete
  await page.goto(`${cfg.url}/#/studies/${cfg.to_pause}`);
  await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
  await page.click("#act-pause");
  await stateBadge(page, "paused");
  check((await apiStudy(page, cfg.url, cfg.to_pause)).state === "paused" && await page.isVisible("#act-resume"), "pause: the study is paused (API) and offers resume");
  await shot("actions.png");
  await page.click("#act-resume");
  await stateBadge(page, "running");
  check((await apiStudy(page, cfg.url, cfg.to_pause)).state === "running", "resume: the study runs again");
  let asked = "";
  page.once("dialog", (d) => { asked = d.message(); d.dismiss(); });
  await page.click("#act-cancel");
  await page.waitForTimeout(300);
  check(asked.includes("Cancel study") && (await apiStudy(page, cfg.url, cfg.to_pause)).state === "running", "cancel asks first; dismissed, nothing happens");
  page.once("dialog", (d) => d.accept());
  await page.click("#act-cancel");
  await stateBadge(page, "cancelled");
  check((await apiStudy(page, cfg.url, cfg.to_pause)).state === "cancelled", "cancel confirmed: the study is cancelled");
  await page.goto(`${cfg.url}/#/studies/${cfg.to_delete}`);
  await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
  asked = "";
  page.once("dialog", (d) => { asked = d.message(); d.accept(); });
  await page.click("#act-delete");
  await page.waitForFunction(() => location.hash === "#/", null, { timeout: 10000 });
  check(asked.includes("Delete study") && (await apiStudy(page, cfg.url, cfg.to_delete)).status === 404, "delete asks first, then the study is gone (404) and the page goes back to the list");

  // ---- refit and ensemble buttons on the embedded study
  const models = async () => (await apiGet(page, `${cfg.url}/api/v1/studies/${cfg.embedded}/models`)).models;
  const before = await models();
  await page.goto(`${cfg.url}/#/studies/${cfg.embedded}`);
  await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
  const rowsBefore = await page.$$eval("#models tbody tr", (r) => r.length);
  await page.fill("#models-top-n", "1");
  await page.click("#act-refit");
  /* the call only queues the refit: the message says so, its row shows at once and follows it until it has trained */
  const queued = await page.waitForFunction(() => /^refit: model \d+ (queued|running)$/.test(document.querySelector("#action-msg").textContent), null, { timeout: 10000 })
    .then(() => true, () => false);
  const afterRefit = await models();
  const refit = afterRefit.find((m) => !before.some((b) => b.id === m.id));
  const shownAtOnce = !!refit && await page.waitForSelector(`#models tr[data-model="${refit.id}"]`, { timeout: 5000 }).then(() => true, () => false);
  check(queued && shownAtOnce, `refit: "${await page.textContent("#action-msg")}" and its row shown without a reload (${rowsBefore} rows before, ${await page.$$eval("#models tbody tr", (r) => r.length)} now)`);
  const trained = shownAtOnce && await page.waitForFunction((id) => /complete|failed/.test(document.querySelector(`#models tr[data-model="${id}"]`).children[2].textContent),
    refit.id, { timeout: 60000 }).then(() => true, () => false);
  check(trained, "refit: its row follows it until it has trained (complete), without a reload");
  await page.fill("#models-top-n", "2");
  await page.selectOption("#ensemble-method", "mean");
  await page.click("#act-ensemble");
  await page.waitForFunction(() => /^ensemble: model \d+ (queued|running|complete)$/.test(document.querySelector("#action-msg").textContent), null, { timeout: 10000 })
    .catch(() => {});
  const afterEns = await models();
  const newRefits = afterRefit.filter((m) => !before.some((b) => b.id === m.id));
  const newEns = afterEns.filter((m) => !afterRefit.some((b) => b.id === m.id));
  check(newRefits.length === 1 && newRefits[0].kind === "refit" && newEns.length === 1 && newEns[0].kind === "ensemble" && newEns[0].how.method === "mean",
    `refit and ensemble buttons: a new refit (${newRefits.map((m) => m.kind)}) and a new mean ensemble (${newEns.map((m) => m.kind)})`);

  // ---- hpod --token: the dashboard asks, says a wrong token is refused, then works
  const tk = cfg.token;
  await page.goto(`${tk.url}/#/studies/${tk.study}`);
  await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
  await page.click("#act-pause");
  await page.waitForSelector("#token-dialog[open]");
  const first = await page.textContent("#token-error");
  const shown = await page.textContent("#action-msg");
  check(/401/.test(first) && /Authorization/.test(first) && /401 unauthorized/.test(shown), `no token: the 401 is shown (${shown.trim()}) and the token asked for`);
  await page.fill("#token-input", "not-the-token");
  await page.click("#token-ok");
  await page.waitForFunction(() => /refused/.test(document.querySelector("#token-error").textContent) && document.querySelector("#token-dialog").open);
  check((await apiStudy(page, tk.url, tk.study)).state === "running" && await page.evaluate(() => sessionStorage.getItem("hpo.token")) === null,
    "a wrong token: refused (401, said so in the dialog), forgotten, and nothing changed");
  await shot("actions-token.png");
  await page.fill("#token-input", tk.token);
  await page.click("#token-ok");
  await stateBadge(page, "paused");
  const kept = await page.evaluate(() => sessionStorage.getItem("hpo.token"));
  check((await apiStudy(page, tk.url, tk.study)).state === "paused" && kept === tk.token && (await page.textContent("#token-button")).includes("token set"),
    "the right token: the study is paused and the token kept in sessionStorage");
  await page.click("#act-resume");
  await stateBadge(page, "running");
  check(!(await page.isVisible("#token-dialog[open]")) && (await apiStudy(page, tk.url, tk.study)).state === "running", "with the token kept, resume needs no prompt");
}

export async function darkMode({ ctx, cfg, check, shot }) {
  const page = await ctx.newPage();
  try {
    await page.emulateMedia({ colorScheme: "dark" });
    await page.goto(`${cfg.url}/#/studies/${cfg.finished}`);
    await page.evaluate(() => localStorage.removeItem("hpo.theme"));
    await page.reload();
    await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
    const look = () => page.evaluate(() => ({
      theme: document.documentElement.dataset.theme,
      bg: getComputedStyle(document.body).backgroundColor,
      chartDark: ["history", "parallel", "curves"].map((n) => window.Charts.all[n].getOption().darkMode === true),
      stored: localStorage.getItem("hpo.theme"),
    }));
    let l = await look();
    check(l.theme === "dark" && l.bg === "rgb(18, 21, 28)" && l.chartDark.every(Boolean) && l.stored === null,
      `dark mode follows prefers-color-scheme: dark page and dark ECharts theme (${JSON.stringify(l)})`);
    await shot("dark.png", page);
    await page.click("#theme-toggle");
    await page.waitForFunction(() => window.__hpo.ready && window.Charts.all.history && window.Charts.all.history.getOption().darkMode !== true);
    l = await look();
    check(l.theme === "light" && l.bg === "rgb(246, 247, 249)" && l.chartDark.every((d) => !d) && l.stored === "light",
      "the toggle switches to light (charts too) and remembers it in localStorage");
    await page.reload();
    await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
    l = await look();
    check(l.theme === "light" && l.chartDark.every((d) => !d), "after a reload the remembered light theme wins over the system's dark");
    await page.evaluate(() => localStorage.removeItem("hpo.theme"));
  } finally {
    await page.close();
  }
}

export async function templateStudy({ page, cfg, check, shot }) {
  const s = await apiStudy(page, cfg.url, cfg.template);
  /* the effective space (the template's, as the study has none of its own) */
  const space = Object.keys(s.space || s.definition.space || {});
  check(!s.definition.space && space.length >= 5, `the study names only a template; hpod shows its space (${space})`);
  const done = complete(await apiTrials(page, cfg.url, cfg.template));
  await page.goto(`${cfg.url}/#/studies/${cfg.template}`);
  await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
  const o = await option(page, "parallel");
  const axes = o.axes.map((a) => a.name);
  const lines = o.series[0].data;
  check(space.length >= 5 && axes.join() === [...space, "objective"].join() && lines.length === done.length &&
    lines.every((row) => row.length === axes.length && row.every((v) => v !== undefined && v !== null)),
    `template-only study: parallel coordinates on the template's space (${axes}) with ${lines.length} lines (want ${done.length})`);
  await shot("study-template.png");
}
