// Browser test of the dashboard, against a running cluster (run_dashboard_test.sh starts one):
// Debian's headless chromium driven by puppeteer-core. It loads `/`, goes to the submit page, checks
// that a 422 is shown next to its line, submits the MNIST MLP (2 epochs, 10% held out for
// validation) through the form, follows
// to the job page, measures a cold load of that page while the job runs (transfer size, time to the
// first curve point), waits for SUCCEEDED, and checks from the DOM that the curves hold a test point
// for every epoch and that the accuracy shown is the REST API's; uploads a small table and checks that
// the datasets pages list it and show its profile as the REST API gives it; submits an ASHA study
// and checks its page (trials, best trial highlighted, scatter points, curves). Saves screenshots.
//
// Usage: node dashboard_test.mjs URL OUT_DIR      (CHROMIUM: the browser, default /usr/bin/chromium)
import fs from 'node:fs';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const [url, outDir] = process.argv.slice(2);
if (!url || !outDir) {
  console.error('usage: node dashboard_test.mjs URL OUT_DIR');
  process.exit(2);
}
const EPOCHS = 2;
const JOB_TIMEOUT_MS = 150_000;
fs.mkdirSync(outDir, { recursive: true });

let failures = 0;
function check(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures++;
}
// The cluster's token (deploy/local-cluster.sh makes one; empty: an open API): sent on the
// test's own REST calls, and put where the dashboard keeps it (localStorage) before each page loads.
const token = process.env.PSTRAIN_TOKEN || '';
const auth = token ? { Authorization: `Bearer ${token}` } : {};
const rest = async (p) => (await fetch(url + p, { headers: auth })).json();

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--window-size=1400,1000'],
  defaultViewport: { width: 1400, height: 1000 },
});
const metrics = {};
const newPage = async () => {
  const p = await browser.newPage();
  if (token) await p.evaluateOnNewDocument((t) => localStorage.setItem('pstrain.token', t), token);
  return p;
};
try {
  const page = await newPage();
  const consoleErrors = [];
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));

  // `/`: the jobs page, its assets (Chart.js included) served by the coordinator.
  const response = await page.goto(url + '/', { waitUntil: 'networkidle0' });
  check(response.status() === 200 && response.headers()['content-type'].startsWith('text/html'), '/ is the dashboard (text/html)');
  await page.waitForSelector('#jobs');
  check(await page.evaluate(() => typeof window.Chart === 'function'), 'Chart.js loaded from the coordinator');

  // Submit page: the spec is prefilled from deploy/jobs/mnist-mlp.json.
  await page.click('nav a[data-nav=submit]');
  await page.waitForSelector('main[data-ready=true] #spec, #view[data-ready=true] #spec');
  const prefilled = await page.$eval('#spec', (t) => t.value);
  const spec = JSON.parse(prefilled);
  check(spec.name === 'mnist-mlp' && spec.training.epochs > 0, 'submit page prefilled with the MNIST MLP spec');

  // A spec the API refuses (422 naming /model/layers/1/units): the error is shown at that line.
  const setSpec = (text) => page.$eval('#spec', (t, v) => { t.value = v; t.dispatchEvent(new Event('input')); }, text);
  const bad = structuredClone(spec);
  bad.model.layers[1].units = -5;
  const badText = JSON.stringify(bad, null, 2);
  await setSpec(badText);
  await page.click('#submit');
  await page.waitForSelector('#errors li');
  const shown = await page.$eval('#errors li', (li) => ({ field: li.dataset.field, line: Number(li.dataset.line), text: li.textContent }));
  const unitsLine = badText.split('\n').findIndex((l) => l.includes('"units": -5')) + 1;
  check(shown.field === '/model/layers/1/units' && shown.line === unitsLine,
    `422 shown at its field and line (${shown.field} line ${shown.line}, expected line ${unitsLine}): ${shown.text}`);
  check(await page.$eval('#field-error', (b) => !b.hidden && b.dataset.line === String(b.dataset.line) && b.textContent.length > 0),
    'the error bubble is shown next to the line');
  check(await page.$eval('.gutter div.bad', (d) => Number(d.textContent)) === unitsLine, 'the gutter marks the line');
  consoleErrors.length = 0;  // Chromium logs the 422 we asked for

  // Text that is not JSON never leaves the page: the parser's position becomes the line.
  const broken = JSON.stringify(spec, null, 2).split('\n');
  const brokenLine = broken.findIndex((l) => l.includes('"loss"')) + 1;
  broken[brokenLine - 1] = broken[brokenLine - 1].replace(/,$/, '');  // a missing comma
  await setSpec(broken.join('\n'));
  await page.click('#submit');
  await page.waitForSelector('#errors li');
  const syntax = await page.$eval('#errors li', (li) => ({ line: Number(li.dataset.line), text: li.textContent }));
  check(syntax.line === brokenLine + 1 && /not valid JSON/.test(syntax.text),
    `a JSON syntax error is shown at its line (${syntax.line}, expected ${brokenLine + 1}): ${syntax.text}`);

  // The real job: the MNIST MLP with epochs reduced to 2, submitted through the form.
  spec.training.epochs = EPOCHS;
  spec.training.validation_fraction = 0.1;  // and a validation hold-out: its curves too
  await setSpec(JSON.stringify(spec, null, 2));
  const submittedAt = Date.now();
  await page.click('#submit');
  await page.waitForFunction(() => /^#\/jobs\/.+/.test(location.hash), { timeout: 10_000 });
  const id = decodeURIComponent((await page.evaluate(() => location.hash)).replace('#/jobs/', ''));
  console.log(`job ${id}`);
  check((await rest(`/v1/jobs/${id}`)).name === 'mnist-mlp', 'the job exists in the REST API');

  // First curve point on the live page.
  await page.waitForFunction(() => Number(document.querySelector('#chart-loss')?.dataset.pointsTrain) > 0, { timeout: JOB_TIMEOUT_MS });
  metrics.first_point_after_submit_ms = Date.now() - submittedAt;

  // Until the end.
  await page.waitForFunction(() => ['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(document.querySelector('#job-state')?.dataset.state),
    { timeout: JOB_TIMEOUT_MS, polling: 250 });
  const finalState = await page.$eval('#job-state', (e) => e.dataset.state);
  check(finalState === 'SUCCEEDED', `the job page shows SUCCEEDED (${finalState})`);
  metrics.job_seconds = Math.round((Date.now() - submittedAt) / 100) / 10;
  // The last events may still wait for the next redraw (at most 250 ms).
  await page.waitForFunction((n) => Number(document.querySelector('#chart-accuracy').dataset.pointsTest) >= n, { timeout: 10_000 }, EPOCHS)
    .catch(() => {});
  await page.waitForFunction(() => document.querySelector('#download-model'), { timeout: 10_000 }).catch(() => {});

  const status = await rest(`/v1/jobs/${id}`);
  const history = await rest(`/v1/jobs/${id}/metrics`);
  const dom = await page.evaluate(() => {
    const d = (sel) => ({ ...document.querySelector(sel).dataset });
    const acc = document.querySelector('#final-accuracy');
    return {
      loss: d('#chart-loss'), accuracy: d('#chart-accuracy'), throughput: d('#chart-throughput'), workers: d('#chart-workers'),
      timeline: d('#timeline'), final: { text: acc.textContent, value: acc.dataset.value, epoch: acc.dataset.epoch },
      model: document.querySelector('#download-model')?.getAttribute('href'),
      onnx: document.querySelector('#download-onnx')?.getAttribute('href'), mode: document.querySelector('#stream-mode').textContent,
      chartPoints: window.Chart ? Object.values(Chart.instances).map((c) => c.data.datasets.map((s) => s.data.length)) : [],
    };
  });
  console.log('DOM:', JSON.stringify(dom));
  check(Number(dom.accuracy.pointsTest) === EPOCHS, `accuracy curve: a test point for every epoch (${dom.accuracy.pointsTest}/${EPOCHS})`);
  check(Number(dom.loss.pointsTest) === EPOCHS, `loss curve: a test point for every epoch (${dom.loss.pointsTest}/${EPOCHS})`);
  check(Number(dom.loss.pointsVal) === EPOCHS && history.epochs.every((e) => typeof e.val_loss === 'number'),
    `loss curve: a validation point for every epoch (${dom.loss.pointsVal}/${EPOCHS})`);
  check(Number(dom.loss.pointsTrain) === history.steps.length && history.steps.length >= EPOCHS,
    `train curves: every progress report (${dom.loss.pointsTrain} points, ${history.steps.length} reports stored)`);
  check(Number(dom.accuracy.pointsTrain) === Number(dom.loss.pointsTrain), 'train accuracy and loss have as many points');
  check(Number(dom.throughput.points) > 0 && Number(dom.workers.workers) === spec.training.workers,
    `samples/s curve (${dom.throughput.points} points) and a step rate for each of ${spec.training.workers} workers`);
  // (The event carries the epoch's record and the status the job's; their JSON may differ in the
  // last bit of a double, so "equal" is to 1e-12.)
  check(typeof status.test_accuracy === 'number' && Math.abs(Number(dom.final.value) - status.test_accuracy) < 1e-12,
    `final accuracy shown (${dom.final.value}) equals the REST value (${status.test_accuracy})`);
  check(dom.final.text === `${(100 * status.test_accuracy).toFixed(2)}%`, `displayed as ${dom.final.text}`);
  check(dom.model === `/v1/jobs/${id}/model` + (token ? `?access_token=${encodeURIComponent(token)}` : ''),
    'download link to the model (with the token: a link cannot send a header)');
  if (dom.model) {
    const file = await fetch(url + dom.model);  // the link as the browser follows it: no header
    check(file.status === 200 && (await file.arrayBuffer()).byteLength > 1000, 'the download link works as it is');
  }
  check(dom.onnx === `/v1/models/${id}/file?format=onnx` + (token ? `&access_token=${encodeURIComponent(token)}` : ''),
    `an ONNX link (${dom.onnx})`);
  if (dom.onnx) {
    const file = await fetch(url + dom.onnx);
    check(file.status === 200 && (await file.arrayBuffer()).byteLength > 1000, 'the ONNX link downloads the export');
  }
  if (dom.mode === 'event stream') {
    check(Number(dom.timeline.checkpoints) >= 1, `timeline: checkpoints from the event stream (${dom.timeline.checkpoints})`);
  }
  metrics.curves_from = dom.mode;

  const shot = path.join(outDir, 'dashboard-job.png');
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`screenshot: ${shot}`);

  // A coordinator without event streams (404): the page polls the history instead, same curves.
  {
    const older = await newPage();
    await older.setRequestInterception(true);
    older.on('request', (r) => (r.url().includes('/events')
      ? r.respond({ status: 404, contentType: 'application/problem+json', body: '{"status":404}' }) : r.continue()));
    await older.goto(`${url}/#/jobs/${encodeURIComponent(id)}`);
    await older.waitForFunction((n) => Number(document.querySelector('#chart-accuracy')?.dataset.pointsTest) >= n, { timeout: 20_000 }, EPOCHS);
    const polled = await older.evaluate(() => ({
      mode: document.querySelector('#stream-mode').textContent, test: document.querySelector('#chart-accuracy').dataset.pointsTest,
      train: document.querySelector('#chart-loss').dataset.pointsTrain, value: document.querySelector('#final-accuracy').dataset.value }));
    check(polled.mode.startsWith('polling') && Number(polled.test) === EPOCHS && Number(polled.train) === Number(dom.loss.pointsTrain) &&
      Math.abs(Number(polled.value) - status.test_accuracy) < 1e-12, `without an event stream the page polls: ${JSON.stringify(polled)}`);
    await older.close();
  }

  // Drawing 10,000 points per curve: feed synthetic progress reports to the page and time redraws.
  metrics.redraw_ms_at_10000_points = await page.evaluate(() => {
    const times = [];
    let n = 0;
    for (let round = 0; round < 5; round++) {
      for (let k = 0; k < 2000; k++, n++) {
        window.pstrainJobPage.handle('progress', { worker: n % 2, epoch: 1, step: n, steps_done: n, total_steps: 10000,
          loss: 1 / (1 + n / 1000) + 0.05 * Math.sin(n), accuracy: 1 - 1 / (1 + n / 1000), samples_per_second: 5000, time_ms: Date.now() + n });
      }
      const t = performance.now();
      window.pstrainJobPage.draw();
      times.push(performance.now() - t);
    }
    return times.map((t) => Math.round(t * 10) / 10);
  });
  const points = await page.$eval('#chart-loss', (b) => Number(b.dataset.pointsTrain));
  check(points >= 10000 && Math.max(...metrics.redraw_ms_at_10000_points) < 500,
    `redraw with ${points} points per curve: ${metrics.redraw_ms_at_10000_points.join(', ')} ms`);

  // Stragglers: three workers, one at half the others' step rate, is marked.
  const stragglers = await page.evaluate(() => {
    const t0 = Date.now();
    for (let k = 1; k <= 10; k++) {
      for (const [worker, rate] of [[7, 10], [8, 10], [9, 5]]) {
        window.pstrainJobPage.handle('progress', { worker, epoch: 1, step: rate * k, steps_done: 0, total_steps: 100,
          loss: 1, accuracy: 0.5, samples_per_second: 100, time_ms: t0 + 1000 * k });
      }
    }
    window.pstrainJobPage.draw();
    return document.querySelector('#chart-workers').dataset.stragglers;
  });
  check(stragglers === '9', `the slow worker is marked a straggler (${stragglers})`);

  // A longer job, for a cold load of a running job's page (no cache) in a second tab: what it
  // transfers and how long until the first curve point is drawn. Then cancelled from the jobs page.
  const long = structuredClone(spec);
  long.training.epochs = 40;
  const longJob = await (await fetch(url + '/v1/jobs', { method: 'POST', headers: { 'Content-Type': 'application/json', ...auth },
    body: JSON.stringify(long) })).json();
  const id2 = longJob.id;
  for (let t = 0; t < 600; t++) {
    const j = await rest(`/v1/jobs/${id2}`);
    if (j.state === 'RUNNING' && j.step > 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  {
    const cold = await newPage();
    await cold.setCacheEnabled(false);
    await cold.goto(`${url}/#/jobs/${encodeURIComponent(id2)}`, { waitUntil: 'load' });
    await cold.waitForFunction(() => performance.getEntriesByName('pstrain-first-curve-point').length > 0, { timeout: 30_000 });
    Object.assign(metrics, await cold.evaluate(() => {
      const nav = performance.getEntriesByType('navigation')[0];
      const statics = performance.getEntriesByType('resource').filter((r) => r.name.includes('/ui/'));
      const sum = (list, key) => list.reduce((s, r) => s + (r[key] || 0), 0);
      return {
        cold_time_to_first_curve_point_ms: Math.round(performance.getEntriesByName('pstrain-first-curve-point')[0].startTime),
        cold_dom_content_loaded_ms: Math.round(nav.domContentLoadedEventEnd),
        assets_transfer_bytes: nav.transferSize + sum(statics, 'transferSize'),
        assets_body_bytes: nav.encodedBodySize + sum(statics, 'encodedBodySize'),
        assets: [nav, ...statics].map((r) => `${new URL(r.name).pathname} ${r.encodedBodySize}`),
        cold_curves_from: document.querySelector('#stream-mode')?.textContent,
      };
    }));
    await cold.close();
  }
  check(metrics.cold_time_to_first_curve_point_ms > 0, `cold load of a running job's page: first curve point at ${metrics.cold_time_to_first_curve_point_ms} ms`);
  await page.goto(`${url}/#/jobs`);
  await page.waitForSelector(`#jobs tr[data-job="${id2}"] button.danger`);
  page.once('dialog', (d) => d.accept());
  await page.click(`#jobs tr[data-job="${id2}"] button.danger`);
  await page.waitForFunction((id) => document.querySelector(`#jobs tr[data-job="${id}"]`)?.dataset.state === 'CANCELLED', { timeout: 20_000 }, id2);
  check((await rest(`/v1/jobs/${id2}`)).state === 'CANCELLED', 'the jobs page\'s Cancel button cancels a running job');

  // The jobs list and the cluster page.
  await page.goto(`${url}/#/jobs`);
  await page.waitForSelector(`#jobs tr[data-job="${id}"]`);
  check(await page.$eval(`#jobs tr[data-job="${id}"]`, (tr) => tr.dataset.state) === 'SUCCEEDED', 'jobs page lists the job as SUCCEEDED');
  await page.goto(`${url}/#/cluster`);
  await page.waitForSelector('#nodes tr[data-node]');
  const nodes = await page.$$eval('#nodes tr[data-node]', (rows) => rows.map((r) => r.dataset.role));
  const cluster = (await rest('/v1/cluster')).nodes;
  check(nodes.length === cluster.length && nodes.filter((r) => r === 'worker').length === cluster.filter((n) => n.role === 'worker').length,
    `cluster page lists every node (${nodes.length})`);

  // Datasets: a table uploaded over REST is listed, and its page shows each column's profile as
  // the REST API gives it.
  const table = 'plan,age,member,note,churn\npro,31,yes,called twice about billing,stayed\nbasic,NA,no,wants a cheaper plan,left\n' +
    'family,45,,happy with the plan,stayed\npro,,yes,moved to another town,left\n';
  const put = await fetch(`${url}/v1/datasets/dashboard-table/train?label=churn&replace=true`,
    { method: 'PUT', headers: { ...auth, 'Content-Type': 'text/csv' }, body: table });
  check(put.status === 201 || put.status === 200, `a table uploads (HTTP ${put.status})`);
  await page.click('nav a[data-nav=datasets]');
  await page.waitForSelector('#datasets tr[data-dataset="dashboard-table"]');
  check(true, 'the datasets page lists the uploaded table');
  await page.goto(`${url}/#/datasets/dashboard-table`);
  await page.waitForSelector('div[data-split=train] tr[data-column]');
  const profileShown = await page.$$eval('div[data-split=train] tr[data-column]',
    (rows) => rows.map((r) => [r.dataset.column, r.dataset.type, Number(r.querySelector('[data-missing]').dataset.missing)]));
  const profile = (await rest('/v1/datasets/dashboard-table')).splits.train.table.columns.map((c) => [c.name, c.type, c.missing]);
  check(JSON.stringify(profileShown) === JSON.stringify(profile), `the dataset page shows each column's type and missing count: ${JSON.stringify(profileShown)}`);
  // The free-text column ("note") is text, shown with its most frequent tokens as REST gives them.
  const restNote = (await rest('/v1/datasets/dashboard-table')).splits.train.table.columns.find((c) => c.name === 'note');
  check(restNote && restNote.type === 'text', `a free-text column is a text column: ${JSON.stringify(restNote)}`);
  const shownTokens = await page.$eval('div[data-split=train] tr[data-type=text] [data-top-tokens]', (td) => td.dataset.topTokens);
  check(shownTokens === JSON.stringify(restNote.text.top_tokens.slice(0, 5).map(([t]) => t)),
    `the text column's most frequent tokens are shown: ${shownTokens}`);
  await page.screenshot({ path: path.join(outDir, 'dashboard-dataset.png') });

  // Studies: an ASHA study submitted over REST is listed; its page shows every trial, a scatter
  // point per finished trial for each parameter, a curve per trial, and highlights the best trial
  // the REST API names.
  const studySpec = {
    name: 'dashboard-study', algorithm: 'asha', asha: { min_epochs: 1, max_epochs: 2, reduction_factor: 2 },
    metric: 'test_accuracy', max_trials: 4, max_concurrent_trials: 2, seed: 4,
    search_space: { '/optimizer/learning_rate': { loguniform: [0.003, 0.3] }, '/model/layers/1/units': { choice: [8, 16] } },
    spec: { name: 'dashboard-trial', dataset: { name: 'mnist10k' },
      model: { input_shape: [28, 28, 1], layers: [{ type: 'flatten' }, { type: 'dense', units: 16, activation: 'relu' }, { type: 'dense', units: 10 }] },
      optimizer: { type: 'sgd', learning_rate: 0.05 },
      training: { mode: 'sync', global_batch_size: 250, epochs: 2, workers: 1, servers: 1 } },
  };
  const posted = await fetch(`${url}/v1/studies`, { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: JSON.stringify(studySpec) });
  const study = await posted.json();
  check(posted.status === 201 && study.id, `a study is submitted (HTTP ${posted.status})`);
  await page.click('nav a[data-nav=studies]');
  await page.waitForSelector(`#studies tr[data-study="${study.id}"]`);
  check(true, 'the studies page lists it');
  await page.goto(`${url}/#/studies/${encodeURIComponent(study.id)}`);
  await page.waitForFunction(() => document.querySelector('#study-state')?.dataset.state === 'SUCCEEDED', { timeout: JOB_TIMEOUT_MS });
  const studyRest = await rest(`/v1/studies/${study.id}`);
  await new Promise((r) => setTimeout(r, 2500));  // one more poll, after the final state
  const studyDom = await page.evaluate(() => ({
    trials: document.querySelectorAll('#trials tr[data-trial]').length,
    best: [...document.querySelectorAll('#trials tr[data-best]')].map((r) => Number(r.dataset.trial)),
    scatters: [...document.querySelectorAll('[data-param]')].map((b) => [b.dataset.param, Number(b.dataset.points)]),
    series: Number(document.querySelector('#chart-study-epochs').dataset.series),
    bestModel: document.querySelector('#best-model')?.textContent,
  }));
  const finishedTrials = studyRest.trials.filter((t) => t.metric !== null).length;
  check(studyDom.trials === studyRest.trials.length, `the study page lists every trial (${studyDom.trials})`);
  check(studyDom.best.length === 1 && studyDom.best[0] === studyRest.best.trial, `the best trial (${studyRest.best.trial}) is highlighted`);
  check(studyDom.scatters.length === 2 && studyDom.scatters.every(([, n]) => n === finishedTrials),
    `a scatter plot per parameter, a point per finished trial: ${JSON.stringify(studyDom.scatters)}`);
  check(studyDom.series === studyRest.trials.filter((t) => t.history.length).length, `a curve per trial (${studyDom.series})`);
  check(studyDom.bestModel === studyRest.best.model, `the best model is linked (${studyDom.bestModel})`);
  metrics.study = { trials: studyDom.trials, best: studyRest.best };
  await page.screenshot({ path: path.join(outDir, 'dashboard-study.png') });

  // A reload with the browser's cache: every file is revalidated by its ETag, none sent again.
  const revalidated = [];
  const onResponse = (r) => { if (new URL(r.url()).pathname.match(/^\/(ui\/.*)?$/)) revalidated.push(r.status()); };
  page.on('response', onResponse);
  await page.reload({ waitUntil: 'networkidle0' });
  page.off('response', onResponse);
  metrics.reload_statuses = revalidated;
  check(revalidated.length >= 4 && revalidated.every((s) => s === 304), `a reload revalidates every file: ${revalidated.join(', ')}`);

  // Without an event stream (an older coordinator) Chromium logs the refused EventSource: expected.
  if (dom.mode !== 'event stream') consoleErrors.splice(0, Infinity, ...consoleErrors.filter((e) => !/EventSource|\/events|404/.test(e)));
  check(consoleErrors.length === 0, `no errors in the page's console${consoleErrors.length ? ': ' + consoleErrors.join(' | ') : ''}`);
  fs.writeFileSync(path.join(outDir, 'dashboard-metrics.json'), JSON.stringify(metrics, null, 2) + '\n');
  console.log('metrics:', JSON.stringify(metrics));
} catch (e) {
  console.error('FAIL', e);
  failures++;
} finally {
  await browser.close();
}
console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
