// dashboard.mjs - drives the dashboard in Debian's headless Chromium through
// playwright-core (never a downloaded browser). Run by tests/api/test_dashboard.py:
//   node dashboard.mjs CONFIG.json
// CONFIG: {url, web_dir, chromium, out_dir, finished, running, big, embedded,
// template, pbt, to_pause, to_delete, token: {url, token, study}, counts}.
// The analysis views, downloads, actions and themes: views.mjs; notes and
// user_attrs: notes.mjs; what an audit found (tooltips, deleted studies,
// exports, ...): regressions.mjs.
// Prints one line per check ("ok ..." / "FAIL ..."), figures as
// "figure NAME VALUE", and talks to the Python side over stdin/stdout for the
// live-update check ("wait-live" -> Python tells a trial -> "told").
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import os from "node:os";
import * as views from "./views.mjs";
import { notes } from "./notes.mjs";
import { regressions } from "./regressions.mjs";

const cfg = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const require = createRequire(path.join(cfg.web_dir, "package.json"));
const { chromium } = require("playwright-core");

let failed = 0;
function check(cond, what) {
  console.log(`${cond ? "ok" : "FAIL"} ${what}`);
  if (!cond) failed++;
}
const lines = readline.createInterface({ input: process.stdin });
const nextLine = () => new Promise((resolve) => lines.once("line", resolve));

const userDir = fs.mkdtempSync(path.join(os.tmpdir(), "hpo-chromium-"));
// a fresh --user-data-dir: playwright passes it for a persistent context
const ctx = await chromium.launchPersistentContext(userDir, {
  executablePath: cfg.chromium,
  headless: true,
  viewport: { width: 1400, height: 1000 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
    "--no-first-run", "--disable-component-update", "--disable-sync"],
});
const errors = [];
try {
  const page = ctx.pages()[0] || await ctx.newPage();
  page.on("pageerror", (e) => errors.push(String(e)));
  /* the 401s the token check provokes on purpose are the browser's network log, not errors */
  const expected = (m) => / 401 /.test(m.text()) && cfg.token && (m.location().url || "").startsWith(cfg.token.url);
  page.on("console", (m) => { if (m.type() === "error" && !expected(m)) errors.push(m.text()); });
  const shot = (name, p = page) => p.screenshot({ path: path.join(cfg.out_dir, name), fullPage: true });
  /* the number of data points of every series of a chart */
  const chartInfo = (name) => page.evaluate((n) => {
    const c = window.Charts && window.Charts.all[n];
    if (!c || c.isDisposed()) return null;
    const o = c.getOption();
    return {
      series: o.series.map((s) => ({ type: s.type, name: s.name, n: (s.data || []).length, dashed: !!(s.lineStyle && s.lineStyle.type === "dashed"), marks: s.markPoint ? s.markPoint.data.length : 0, data: s.type === "bar" ? s.data : undefined })),
      axes: (o.parallelAxis || []).length,
    };
  }, name);

  // ---- studies list
  await page.goto(cfg.url + "/#/");
  await page.waitForSelector("tr[data-study]");
  const rows = await page.$$eval("tr[data-study]", (r) => r.map((x) => x.textContent));
  check(rows.length === cfg.counts.studies, `studies list shows the ${cfg.counts.studies} studies (${rows.length})`);
  check(rows.some((r) => r.includes("fmnist-mlp") && r.includes(`${cfg.counts.finished_done}/${cfg.counts.finished_max}`)),
    "the finished study shows its progress");
  check(rows.some((r) => r.includes("resnet-ish") && r.includes(`${cfg.counts.running_done}/${cfg.counts.running_max}`)),
    "the running study shows its progress");
  await shot("studies.png");

  // ---- finished study: every chart has data
  await page.click(`tr[data-study="${cfg.finished}"] a`);
  await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
  const hist = await chartInfo("history");
  const nComplete = cfg.counts.complete, nPruned = cfg.counts.pruned;
  const sc = (name) => (hist.series.find((s) => s.name.startsWith(name)) || { n: 0 }).n;
  check(sc("complete") === nComplete && sc("pruned") === nPruned, `history: ${sc("complete")} complete and ${sc("pruned")} pruned points (want ${nComplete}, ${nPruned})`);
  check(sc("best so far") === nComplete, "history: a best-so-far point per complete trial");
  const imp = await chartInfo("importance");
  const shares = imp.series[0].data;
  check(shares.length === 5 && Math.abs(shares.reduce((a, b) => a + b, 0) - 1) < 1e-6, `importance: 5 parameters summing to 1 (${shares.map((v) => v.toFixed(2))})`);
  const curves = await chartInfo("curves");
  const prunedCurves = curves.series.filter((s) => s.dashed);
  const full = Math.max(...curves.series.map((s) => s.n));
  check(curves.series.length >= 6 && curves.series.every((s) => s.n > 0), `learning curves: ${curves.series.length} trials with points`);
  check(prunedCurves.length > 0 && prunedCurves.every((s) => s.n < full && s.marks === 1),
    `learning curves: ${prunedCurves.length} pruned trials dashed, cut short (< ${full} steps) and marked`);
  const par = await chartInfo("parallel");
  check(par.axes === 6 && par.series[0].n === nComplete, `parallel coordinates: 6 axes, ${par.series[0].n} lines`);
  const tableRows = await page.$$eval("#trials tbody tr", (r) => r.length);
  check(tableRows === 50, `trials table: one page of 50 rows (${tableRows})`);
  // the "last step" column is the trial's last reported step, as the API says
  const shown = await page.$$eval("#trials", (tables) => {
    const t = tables[0], col = [...t.querySelectorAll("thead th")].findIndex((th) => th.textContent === "last step");
    return { col, rows: [...t.querySelectorAll("tbody tr")].map((r) => [r.dataset.trial, r.children[col] ? r.children[col].textContent : null]) };
  });
  const apiTrials = await page.evaluate(async (sid) => (await (await fetch(`/api/v1/studies/${sid}/trials?limit=1000`)).json()).trials, cfg.finished);
  const lastStep = new Map(apiTrials.map((t) => [String(t.trial_id), t.last_step === null ? "–" : String(t.last_step)]));
  const wrong = shown.rows.filter(([id, text]) => lastStep.get(id) !== text);
  check(shown.col > 0 && shown.rows.length === 50 && wrong.length === 0,
    `trials table: "last step" shows each trial's last_step (${wrong.length} rows differ${wrong.length ? ": " + JSON.stringify(wrong.slice(0, 3)) : ""})`);
  await shot("study-finished.png");

  // table: sort by value, filter by state, paginate
  await page.click('th[data-sort="value"]');
  await page.waitForFunction(() => document.querySelector('th[data-sort="value"]').className.includes("on"));
  await page.waitForTimeout(300);
  const vals = await page.$$eval("#trials tbody tr td:nth-child(4)", (c) => c.map((x) => parseFloat(x.textContent)));
  check(vals.length === 50 && vals.every((v, i) => i === 0 || isNaN(v) || v >= vals[i - 1]), "sort by value: ascending for a minimised objective");
  await page.selectOption("#state-filter", "pruned");
  await page.waitForFunction((n) => document.querySelectorAll("#trials tbody tr").length === Math.min(n, 50), nPruned);
  const states = await page.$$eval("#trials tbody tr td:nth-child(3)", (c) => c.map((x) => x.textContent));
  check(states.length === Math.min(nPruned, 50) && states.every((s) => s === "pruned"), `filter pruned: ${states.length} pruned rows`);
  await page.selectOption("#state-filter", "");
  await page.waitForFunction(() => /1–50 of/.test(document.querySelector(".pager").textContent));
  await page.click(".pager button:last-child");
  await page.waitForFunction(() => /51–/.test(document.querySelector(".pager").textContent));
  check(true, "pagination: next page");

  // learning curves follow the ticked trials
  const first = "#trials tbody tr:first-child";
  const num = (await page.textContent(`${first} td:nth-child(2)`)).trim();
  const wasOn = await page.isChecked(`${first} input[type=checkbox]`);
  await page.click(`${first} input[type=checkbox]`);
  await page.waitForFunction(([n, on]) => {
    const c = window.Charts.all.curves;
    return c && c.getOption().series.some((s) => s.name.startsWith(`#${n} `)) === on;
  }, [num, !wasOn], { timeout: 5000 }).catch(() => null);
  const curves2 = await chartInfo("curves");
  const has = curves2.series.some((s) => s.name.startsWith(`#${num} `));
  check(has === !wasOn && curves2.series.length <= 12,
    `${wasOn ? "unticking" : "ticking"} trial #${num} ${wasOn ? "removes it from" : "adds it to"} the learning curves (${curves2.series.length} shown)`);

  // ---- a trial
  await page.click("#trials tbody tr:first-child td:nth-child(2) a");
  await page.waitForSelector("#params tr");
  const params = await page.$$eval("#params tr", (r) => r.length);
  check(params >= 4, `trial page lists its ${params} parameters`);
  const tc = await chartInfo("trial");
  check(tc === null ? (await page.textContent("#chart-trial")).includes("No intermediate") : tc.series[0].n > 0, "trial page: its learning curve");
  await shot("trial.png");

  // ---- embedded study: trained by hpod, refits and an ensemble
  await page.goto(cfg.url + `/#/studies/${cfg.embedded}`);
  await page.waitForFunction(() => window.__hpo && window.__hpo.ready && window.__hpo.models, null, { timeout: 15000 });
  const mc = await chartInfo("models");
  const testBars = mc ? mc.series.find((s) => s.name === "test").n : 0;
  check(testBars === 3, `refits and ensembles: test bars for 2 refits and the ensemble (${testBars})`);
  const modelRows = await page.$$eval("#models tbody tr", (r) => r.map((x) => x.textContent));
  check(modelRows.length === 3 && modelRows.some((r) => r.includes("ensemble") && r.includes("weighted")),
    "refits and ensembles: a table with the ensemble's method and weights");
  const ec = await chartInfo("curves");
  check(ec && ec.series.length === 6 && ec.series.every((s) => s.n === 3), `embedded: learning curves of 6 trials x 3 epochs`);
  await shot("study-embedded.png");
  await page.click("#trials tbody tr:first-child td:nth-child(2) a");
  await page.waitForSelector("#chart-training");
  await page.waitForFunction(() => window.Charts.all.training);
  const tr = await chartInfo("training");
  check(tr && tr.series.length >= 4 && tr.series.every((s) => s.n === 3), `embedded trial: training curves of ${tr ? tr.series.length : 0} metrics per epoch`);
  await shot("trial-embedded.png");

  // ---- studies with several objectives: the Pareto front, infeasible trials grey, a third objective as colour
  for (const [sid, m] of [[cfg.pareto2, 2], [cfg.pareto3, 3]]) {
    await page.goto(cfg.url + `/#/studies/${sid}`);
    await page.waitForFunction(() => window.__hpo && window.__hpo.ready && window.__hpo.pareto, null, { timeout: 15000 });
    const best = await page.evaluate(async (id) => (await (await fetch(`/api/v1/studies/${id}/best`)).json()), sid);
    const pc = await chartInfo("pareto");
    const n = (name) => (pc ? (pc.series.find((s) => s.name === name) || { n: -1 }).n : -1);
    check(pc && n("Pareto front") === best.trials.length && best.trials.length > 0,
      `pareto (${m} objectives): the front's ${best.trials.length} trials in red (${n("Pareto front")})`);
    check(n("infeasible") > 0 && n("Pareto front") + n("dominated") + n("infeasible") === 40,
      `pareto (${m} objectives): infeasible trials grey (${n("infeasible")}), 40 points in all`);
    const vm = await page.evaluate(() => (window.Charts.all.pareto.getOption().visualMap || []).length);
    check(m === 3 ? vm === 1 : vm === 0, `pareto (${m} objectives): ${m === 3 ? "the third objective as colour" : "no colour scale"}`);
    check(await page.isVisible("#pareto"), `pareto (${m} objectives): the panel is shown`);
    await shot(`study-pareto${m}.png`);
  }
  await page.goto(cfg.url + `/#/studies/${cfg.finished}`);
  await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
  check(await page.isHidden("#pareto"), "a one-objective study has no Pareto panel");

  // ---- running study, live updates
  await page.goto(cfg.url + `/#/studies/${cfg.running}`);
  await page.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 15000 });
  const before = await page.textContent(".summary");
  check(before.includes(`${cfg.counts.running_open} running`), `running study shows ${cfg.counts.running_open} running trials`);
  await shot("study-running.png");
  console.log("wait-live");
  await nextLine(); // the Python side told one of the running trials
  const t1 = Date.now();
  await page.waitForFunction((n) => document.querySelector(".summary").textContent.includes(`${n} running`), cfg.counts.running_open - 1, { timeout: 15000 });
  check(true, "the page updates itself when a trial finishes");
  console.log(`figure live_update_s ${((Date.now() - t1) / 1000).toFixed(2)}`);

  // ---- 10,000 trials: interactive quickly, never 10,000 rows
  if (cfg.big) {
    const p2 = await ctx.newPage();
    p2.on("pageerror", (e) => errors.push(String(e)));
    const t0 = Date.now();
    await p2.goto(cfg.url + `/#/studies/${cfg.big}`);
    await p2.waitForSelector("#trials tbody tr");
    const tTable = (Date.now() - t0) / 1000;
    await p2.waitForFunction(() => window.__hpo && window.__hpo.interactiveMs > 0, null, { timeout: 30000 });
    const tInteractive = (Date.now() - t0) / 1000;
    await p2.waitForFunction(() => window.__hpo && window.__hpo.ready, null, { timeout: 30000 });
    const tReady = (Date.now() - t0) / 1000;
    const rowsBig = await p2.$$eval("#trials tbody tr", (r) => r.length);
    const hb = await p2.evaluate(() => window.Charts.all.history.getOption().series.reduce((a, s) => a + s.data.length, 0));
    /* interactive: a click on "next" answers quickly */
    const t2 = Date.now();
    await p2.click(".pager button:last-child");
    await p2.waitForFunction(() => /51–100 of/.test(document.querySelector(".pager").textContent));
    const tClick = (Date.now() - t2) / 1000;
    const marks = await p2.evaluate(() => window.__hpo.marks);
    console.log(`marks (ms since navigation start): ${JSON.stringify(marks)}`);
    console.log(`figure big_table_s ${tTable.toFixed(3)}`);
    console.log(`figure big_interactive_s ${tInteractive.toFixed(3)}`);
    console.log(`figure big_all_charts_s ${tReady.toFixed(3)}`);
    console.log(`figure big_next_page_s ${tClick.toFixed(3)}`);
    check(rowsBig === 50, `10,000-trial study: the table renders one page (${rowsBig} rows)`);
    check(hb >= 10000, `10,000-trial study: history has ${hb} points`);
    /* the times are figures (printed above and by the Python side), not
     * checks: a test must not depend on the machine's speed or load */
    check(marks && marks.history > 0 && marks.curves > 0, `10,000-trial study: every chart drawn (${JSON.stringify(marks)})`);
    await p2.screenshot({ path: path.join(cfg.out_dir, "study-10k.png"), fullPage: true });
    await p2.close(); /* its feed would keep redrawing 10,000 trials beside the checks below */
  }
  // ---- the analysis views, downloads, notes and user_attrs, study actions (with and without a token), dark mode
  const env = { ctx, page, cfg, check, shot };
  const parts = { ...views, notes, regressions };
  for (const part of ["analysisViews", "downloads", "notes", "templateStudy", "darkMode", "actions", "regressions"]) {
    const t = Date.now();
    try {
      await parts[part](env);
    } catch (e) {
      check(false, `${part}: ${e && e.stack || e}`);
    }
    console.log(`figure ${part}_s ${((Date.now() - t) / 1000).toFixed(2)}`);
  }
  check(errors.length === 0, `no JavaScript errors${errors.length ? ": " + errors.slice(0, 3).join(" | ") : ""}`);
} catch (e) {
  console.log(`FAIL exception: ${e && e.stack || e}`);
  failed++;
} finally {
  await ctx.close();
  fs.rmSync(userDir, { recursive: true, force: true });
  lines.close();
}
process.exit(failed ? 1 : 0);
