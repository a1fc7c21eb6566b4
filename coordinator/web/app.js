// pstrain dashboard: one page with hash routes, plain DOM and Chart.js (Debian's libjs-chart.js,
// served by the coordinator at /ui/chart.min.js). No build step, no framework.
//
//   #/jobs        the jobs (polled every 2 s): state, progress, ETA, accuracy, mode, created; cancel
//   #/jobs/ID     one job: curves fed by its event stream (GET /v1/jobs/ID/events: the history is
//                 replayed, then live events follow); facts, workers and servers polled from
//                 GET /v1/jobs/ID; the timeline of backups, checkpoints, recoveries and node changes
//   #/cluster     GET /v1/cluster (polled)
//   #/submit      a spec in a text area (prefilled from deploy/jobs/), submitted with POST /v1/jobs;
//                 a 422's field (a JSON pointer) is shown next to its line
//
// Auth: a token kept in localStorage ("pstrain.token") goes out as "Authorization: Bearer" on
// every fetch and as ?access_token= on event streams (EventSource cannot send headers).
//
// For the browser test (tests/browser/) the job page exposes what it shows as data attributes:
// each chart's container has data-points-<series> counts, #job-state has data-state, and
// #final-accuracy has data-value (the last epoch's test accuracy, as received).
'use strict';

const TOKEN_KEY = 'pstrain.token';
const POLL_MS = 2000;
const DRAW_MS = 250;          // charts redraw at most this often, however fast events arrive
const DECIMATE_SAMPLES = 600; // a curve with more points is drawn decimated (LTTB), never all of them
const STRAGGLER_RATIO = 0.8;  // a worker below this fraction of the median step rate is a straggler
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);

// ---- Small helpers --------------------------------------------------------------------------

function token() { return localStorage.getItem(TOKEN_KEY) || ''; }

// A URL the browser fetches by itself (a download link, an event stream), which cannot carry an
// Authorization header: the token rides as ?access_token= (the API takes it on reads only).
function withToken(url) {
  return token() ? `${url}${url.includes('?') ? '&' : '?'}access_token=${encodeURIComponent(token())}` : url;
}

async function api(path, options = {}) {
  const headers = new Headers(options.headers || {});
  if (token()) headers.set('Authorization', 'Bearer ' + token());
  const response = await fetch(path, { ...options, headers });
  const type = response.headers.get('Content-Type') || '';
  const body = type.includes('json') ? await response.json() : await response.text();
  if (!response.ok) {
    const error = new Error((body && body.detail) || `${response.status} ${response.statusText}`);
    error.status = response.status;
    error.problem = typeof body === 'object' ? body : null;
    throw error;
  }
  return body;
}

// h('td', {class: 'num'}, 'text', child...): an element; strings become text nodes (never HTML).
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'style') el.style.cssText = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const pct = (x) => (x === null || x === undefined ? '–' : (100 * x).toFixed(2) + '%');
const num = (x, digits = 1) => (x === null || x === undefined ? '–' : Number(x).toFixed(digits));

function duration(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return '–';
  seconds = Math.max(0, Math.round(seconds));
  const h_ = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
  return h_ ? `${h_}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`;
}

function ago(ms) {
  if (!ms) return '–';
  const s = (Date.now() - ms) / 1000;
  return s < 60 ? `${Math.round(s)} s ago` : s < 3600 ? `${Math.round(s / 60)} min ago` : new Date(ms).toLocaleString();
}

const clock = (ms) => new Date(ms).toLocaleTimeString();
const badge = (state) => h('span', { class: `badge ${state}` }, state);

function progressBar(percent, big = false) {
  const bar = h('span', { class: big ? 'bar big' : 'bar', role: 'progressbar', 'aria-valuenow': percent });
  bar.append(h('span', { style: `width:${Math.min(100, percent || 0)}%` }));
  return bar;
}

// Runs `fn` now and every `ms` while the view lives; returns the stop function.
function every(ms, fn) {
  let stopped = false, timer = 0;
  const tick = async () => {
    try { await fn(); } catch (e) { console.warn(e); }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}

// ---- Router ---------------------------------------------------------------------------------

let cleanup = () => {};

function route() {
  cleanup();
  cleanup = () => {};
  const view = document.getElementById('view');
  view.replaceChildren();
  const hash = location.hash.replace(/^#\/?/, '');
  const [page, ...rest] = hash.split('/');
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.nav === (page || 'jobs'));
  let stop;
  if (page === 'jobs' && rest.length) stop = jobView(view, decodeURIComponent(rest.join('/')));
  else if (page === 'cluster') stop = clusterView(view);
  else if (page === 'submit') stop = submitView(view);
  else stop = jobsView(view);
  cleanup = stop || (() => {});
}

function start() {
  const input = document.getElementById('token');
  input.value = token();
  document.getElementById('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (input.value) localStorage.setItem(TOKEN_KEY, input.value);
    else localStorage.removeItem(TOKEN_KEY);
    route();
  });
  window.addEventListener('hashchange', route);
  route();
}

// ---- Jobs -----------------------------------------------------------------------------------

function jobsView(view) {
  const body = h('tbody');
  const error = h('p', { class: 'error' });
  view.append(
    h('h1', {}, 'Jobs'),
    h('div', { class: 'panel' },
      h('table', { id: 'jobs' },
        h('thead', {}, h('tr', {},
          ['Job', 'Name', 'State', 'Progress', 'ETA', 'Test accuracy', 'Samples/s', 'Mode', 'Created', ''].map(
            (t, i) => h('th', { class: [4, 5, 6].includes(i) ? 'num' : null }, t)))),
        body),
      error));
  const eta = new Map();  // job id -> eta_seconds (from GET /v1/jobs/{id}, for running jobs only)
  return every(POLL_MS, async () => {
    let list;
    try {
      list = (await api('/v1/jobs')).jobs;
      error.textContent = '';
    } catch (e) {
      error.textContent = 'Cannot list jobs: ' + e.message;
      return;
    }
    list.sort((a, b) => b.submitted_at_ms - a.submitted_at_ms);
    await Promise.all(list.filter((j) => j.state === 'RUNNING' || j.state === 'RECOVERING').map(async (j) => {
      try { eta.set(j.id, (await api(`/v1/jobs/${encodeURIComponent(j.id)}`)).eta_seconds); } catch (e) { /* gone */ }
    }));
    body.replaceChildren(...list.map((j) => {
      const cancel = TERMINAL.has(j.state) ? '' : h('button', {
        class: 'danger', onclick: async (e) => {
          e.target.disabled = true;
          try { await api(`/v1/jobs/${encodeURIComponent(j.id)}/cancel`, { method: 'POST' }); }
          catch (err) { alert('Cancel failed: ' + err.message); }
        },
      }, 'Cancel');
      return h('tr', { 'data-job': j.id, 'data-state': j.state },
        h('td', { class: 'mono' }, h('a', { href: `#/jobs/${encodeURIComponent(j.id)}` }, j.id)),
        h('td', {}, j.name),
        h('td', {}, badge(j.state)),
        h('td', {}, progressBar(j.percent), ' ', h('span', { class: 'muted' }, `${num(j.percent, 0)}% · ${j.step}/${j.total_steps}`)),
        h('td', { class: 'num' }, TERMINAL.has(j.state) ? '' : duration(eta.get(j.id))),
        h('td', { class: 'num' }, pct(j.test_accuracy)),
        h('td', { class: 'num' }, num(j.samples_per_second, 0)),
        h('td', {}, j.mode),
        h('td', { title: new Date(j.submitted_at_ms).toLocaleString() }, ago(j.submitted_at_ms)),
        h('td', {}, cancel));
    }));
    if (!list.length) body.append(h('tr', {}, h('td', { colspan: 10, class: 'muted' }, 'No jobs yet: ', h('a', { href: '#/submit' }, 'submit one'))));
  });
}

// ---- One job --------------------------------------------------------------------------------

// A line chart over a linear x axis whose datasets are plain arrays of {x, y}, drawn decimated.
function lineChart(canvas, xTitle, series, yOptions = {}) {
  if (!window.Chart) return null;
  return new Chart(canvas, {
    type: 'line',
    data: {
      datasets: series.map((s) => ({
        label: s.label, data: [], borderColor: s.color, backgroundColor: s.color, borderWidth: s.points ? 2 : 1.2,
        pointRadius: s.points ? 3 : 0, parsing: false, normalized: true, spanGaps: true, yAxisID: s.axis || 'y',
        showLine: true, tension: 0,
      })),
    },
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false, normalized: true,
      interaction: { mode: 'nearest', intersect: false, axis: 'x' },
      plugins: { decimation: { enabled: true, algorithm: 'lttb', samples: DECIMATE_SAMPLES }, legend: { labels: { boxWidth: 12 } } },
      scales: { x: { type: 'linear', title: { display: true, text: xTitle } }, y: { beginAtZero: false, ...yOptions } },
    },
  });
}

function jobView(view, id) {
  const path = `/v1/jobs/${encodeURIComponent(id)}`;
  const el = {};
  const ids = ['job-state', 'job-progress', 'job-epoch', 'job-eta', 'job-rate', 'final-accuracy', 'job-steps', 'model-link', 'job-reason'];
  for (const i of ids) el[i] = h('span', { id: i });
  const chartBox = (key, title, note) => {
    const canvas = h('canvas', { id: `canvas-${key}` });
    const box = h('div', { class: 'chart', id: `chart-${key}` }, h('h2', {}, title, note ? h('small', { class: 'muted' }, ' ' + note) : ''), h('div', { class: 'canvas' }, canvas));
    return { box, canvas };
  };
  const loss = chartBox('loss', 'Loss', 'train per report, test per epoch');
  const accuracy = chartBox('accuracy', 'Accuracy', 'train per report, test per epoch');
  const speed = chartBox('throughput', 'Samples/s', 'job-wide, over time');
  const workers = chartBox('workers', 'Step rate by worker', 'steps/s over the last reports; red: straggler');
  const workerRows = h('tbody'), serverRows = h('tbody');
  const strip = h('div', { class: 'timeline-strip', title: 'backups, checkpoints, recoveries and node changes over the run' });
  const timeline = h('ol', { class: 'timeline', id: 'timeline' });
  const streamNote = h('small', { class: 'muted', id: 'stream-mode' });
  const cancelButton = h('button', { class: 'danger', hidden: true, onclick: async () => {
    cancelButton.disabled = true;
    try { await api(`${path}/cancel`, { method: 'POST' }); } catch (e) { alert('Cancel failed: ' + e.message); }
  } }, 'Cancel');
  const title = h('h1', {}, 'Job ', h('span', { class: 'mono' }, id));
  view.append(
    title,
    h('div', { class: 'panel' },
      h('div', { class: 'toolbar' }, el['job-state'], el['job-reason'], h('span', { style: 'flex:1' }), el['model-link'], cancelButton),
      progressBar(0, true),
      h('div', { class: 'facts' },
        h('div', {}, h('small', {}, 'Epoch'), h('b', {}, el['job-epoch'])),
        h('div', {}, h('small', {}, 'Steps'), h('b', {}, el['job-steps'])),
        h('div', {}, h('small', {}, 'ETA'), h('b', {}, el['job-eta'])),
        h('div', {}, h('small', {}, 'Samples/s'), h('b', {}, el['job-rate'])),
        h('div', {}, h('small', {}, 'Test accuracy (last epoch)'), h('b', {}, el['final-accuracy'])),
        h('div', {}, h('small', {}, 'Curves from'), h('b', {}, streamNote)))),
    h('div', { class: 'charts' }, loss.box, accuracy.box, speed.box, workers.box),
    h('div', { class: 'grid2' },
      h('div', { class: 'panel' }, h('h2', {}, 'Workers'), h('table', {}, h('thead', {}, h('tr', {},
        ['Worker', 'Name', 'Address', 'Alive', 'Heartbeat', 'Step', 'Steps/s', ''].map((t) => h('th', {}, t)))), workerRows)),
      h('div', { class: 'panel' }, h('h2', {}, 'Servers'), h('table', {}, h('thead', {}, h('tr', {},
        ['Server', 'Name', 'Address', 'Alive', 'Heartbeat'].map((t) => h('th', {}, t)))), serverRows))),
    h('div', { class: 'panel' }, h('h2', {}, 'Timeline'), strip, timeline));
  const bigBar = view.querySelector('.bar.big > span');

  const charts = {
    loss: lineChart(loss.canvas, 'epoch', [
      { label: 'train loss', color: '#1f6feb' }, { label: 'test loss', color: '#cf222e', points: true }]),
    accuracy: lineChart(accuracy.canvas, 'epoch', [
      { label: 'train accuracy', color: '#1f6feb' }, { label: 'test accuracy', color: '#cf222e', points: true }],
      { suggestedMax: 1 }),
    speed: lineChart(speed.canvas, 'seconds', [{ label: 'samples/s (sum of workers)', color: '#1a7f37' }], { beginAtZero: true }),
    workers: window.Chart ? new Chart(workers.canvas, {
      type: 'bar',
      data: { labels: [], datasets: [{ label: 'steps/s', data: [], backgroundColor: [] }] },
      options: { animation: false, responsive: true, maintainAspectRatio: false, plugins: { legend: { display: false } },
        scales: { y: { beginAtZero: true, title: { display: true, text: 'steps/s' } } } },
    }) : null,
  };

  // What the curves hold: plain arrays (the charts get them at each redraw; decimation draws a sample).
  const data = { trainLoss: [], testLoss: [], trainAcc: [], testAcc: [], speed: [] };
  const perWorker = new Map();  // worker -> {reports: [{t, step}], rate, samples_per_second, step}
  const events = [];            // timeline entries {time_ms, type, text}
  let stepsPerEpoch = 0, epochs = 0, t0 = 0, lastSeq = 0, received = 0, drawTimer = 0, finished = false;
  let firstPointMarked = false;

  const epochX = (stepsDone, epoch) => (stepsPerEpoch > 0 ? stepsDone / stepsPerEpoch : epoch);

  function scheduleDraw() {
    // The first points at once (time to first curve), then at most every DRAW_MS.
    if (!drawTimer) drawTimer = setTimeout(draw, firstPointMarked ? DRAW_MS : 0);
  }

  function rates() {
    const list = [...perWorker.entries()].sort((a, b) => a[0] - b[0]);
    const values = list.map(([, w]) => w.rate).filter((r) => r > 0).sort((a, b) => a - b);
    const median = values.length ? values[Math.floor(values.length / 2)] : 0;
    return list.map(([worker, w]) => ({ worker, ...w, straggler: values.length > 1 && w.rate > 0 && w.rate < STRAGGLER_RATIO * median }));
  }

  function draw() {
    drawTimer = 0;
    const set = (chart, i, array) => { if (chart) chart.data.datasets[i].data = array; };
    set(charts.loss, 0, data.trainLoss); set(charts.loss, 1, data.testLoss);
    set(charts.accuracy, 0, data.trainAcc); set(charts.accuracy, 1, data.testAcc);
    set(charts.speed, 0, data.speed);
    const r = rates();
    if (charts.workers) {
      charts.workers.data.labels = r.map((w) => `worker ${w.worker}`);
      charts.workers.data.datasets[0].data = r.map((w) => w.rate);
      charts.workers.data.datasets[0].backgroundColor = r.map((w) => (w.straggler ? '#cf222e' : '#1f6feb'));
    }
    for (const c of Object.values(charts)) if (c) c.update('none');
    Object.assign(loss.box.dataset, { pointsTrain: data.trainLoss.length, pointsTest: data.testLoss.length });
    Object.assign(accuracy.box.dataset, { pointsTrain: data.trainAcc.length, pointsTest: data.testAcc.length });
    speed.box.dataset.points = data.speed.length;
    workers.box.dataset.workers = r.length;
    workers.box.dataset.stragglers = r.filter((w) => w.straggler).map((w) => w.worker).join(',');
    if (!firstPointMarked && data.trainLoss.length + data.testLoss.length > 0) {
      firstPointMarked = true;
      performance.mark('pstrain-first-curve-point');  // read by the browser test (time to first curve)
    }
    drawTimeline();
    renderNodes();
  }

  function drawTimeline() {
    if (!events.length) return;
    // Live: the strip ends now; finished: at the last event.
    const first = events[0].time_ms, end = events[events.length - 1].time_ms;
    const last = finished ? end : Math.max(Date.now(), end);
    const span = Math.max(1, last - first);
    strip.replaceChildren(...events.filter((e) => e.type !== 'state' || TERMINAL.has(e.state) || e.state === 'RUNNING').map((e) =>
      h('i', { class: `ev-${e.type}`, style: `left:${(100 * (e.time_ms - first)) / span}%`, title: `${clock(e.time_ms)} ${e.text}` })));
    timeline.replaceChildren(...events.slice(-300).reverse().map((e) => h('li', { 'data-type': e.type },  // newest first
      h('span', { class: `dot ev-${e.type}` }), h('time', {}, clock(e.time_ms)), h('span', {}, e.text))));
    timeline.dataset.events = events.length;
    const count = (type) => events.filter((e) => e.type === type).length;
    Object.assign(timeline.dataset, { backups: count('backup'), checkpoints: count('checkpoint'), recoveries: count('recovery'), nodes: count('node') });
  }

  function note(type, d, text) {
    events.push({ type, time_ms: d.time_ms || Date.now(), text, state: d.state });
  }

  // One event, from the stream or (fallback) from polled history. Curves only change here.
  function handle(type, d) {
    if (!t0 && d.time_ms) t0 = d.time_ms;
    switch (type) {
      case 'progress': {
        if (d.total_steps && epochs && !stepsPerEpoch) stepsPerEpoch = d.total_steps / epochs;
        const x = epochX(d.steps_done ?? d.step, d.epoch);
        data.trainLoss.push({ x, y: d.loss });
        data.trainAcc.push({ x, y: d.accuracy });
        let w = perWorker.get(d.worker);
        if (!w) perWorker.set(d.worker, (w = { reports: [], rate: 0, samples_per_second: 0, step: 0 }));
        w.reports.push({ t: d.time_ms, step: d.step });
        if (w.reports.length > 10) w.reports.shift();
        const a = w.reports[0], b = w.reports[w.reports.length - 1];
        if (b.t > a.t) w.rate = (b.step - a.step) / ((b.t - a.t) / 1000);
        w.samples_per_second = d.samples_per_second;
        w.step = d.step;
        let total = 0;
        for (const v of perWorker.values()) total += v.samples_per_second || 0;
        data.speed.push({ x: (d.time_ms - t0) / 1000, y: total });
        if (d.total_steps) el['job-steps'].textContent = `${d.steps_done}/${d.total_steps}`;
        break;
      }
      case 'epoch':
        data.testLoss.push({ x: d.epoch, y: d.test_loss });
        data.testAcc.push({ x: d.epoch, y: d.test_accuracy });
        el['final-accuracy'].textContent = pct(d.test_accuracy);
        el['final-accuracy'].dataset.value = d.test_accuracy;
        el['final-accuracy'].dataset.epoch = d.epoch;
        break;
      case 'state':
        note('state', d, `${d.state}${d.reason ? ': ' + d.reason : ''}`);
        showState(d.state, d.reason);
        break;
      case 'checkpoint':
        note('checkpoint', d, `checkpoint at step ${d.step} (epoch ${d.epoch}, ${(d.bytes / 1e6).toFixed(1)} MB${d.final ? ', final' : ''})`);
        break;
      case 'backup':
        note('backup', d, `backup complete at step ${d.step}`);
        break;
      case 'recovery':
        note('recovery', d, `recovery #${d.recoveries}: ${d.replayed_steps} steps replayed${d.detail ? ' — ' + d.detail : ''}`);
        break;
      case 'node':
        note('node', d, `${d.role} ${d.name || d.node} ${d.change}`);
        break;
      case 'note':
        note('note', d, d.text);
        break;
      case 'warning':
        note('warning', d, `warning (${d.reason}): ${d.detail}`);
        break;
      default:
        return;
    }
    scheduleDraw();
  }

  function showState(state, reason) {
    el['job-state'].replaceChildren(badge(state));
    el['job-state'].dataset.state = state;
    el['job-reason'].textContent = reason ? ` ${reason}` : '';
    cancelButton.hidden = TERMINAL.has(state);
    if (TERMINAL.has(state)) finished = true;
  }

  // Workers (with their step rates from the events) and servers (from the last status).
  let lastStatus = null;
  function renderNodes() {
    const j = lastStatus;
    if (!j) return;
    const r = new Map(rates().map((w) => [w.worker, w]));
    workerRows.replaceChildren(...j.workers.map((n, i) => {
      const w = r.get(i) || r.get(n.id);
      return h('tr', {}, h('td', {}, i), h('td', {}, n.name || n.id), h('td', { class: 'mono' }, n.address || '–'),
        h('td', {}, n.alive ? 'yes' : h('span', { class: 'error' }, 'no')), h('td', {}, n.last_heartbeat_ms_ago !== undefined ? `${n.last_heartbeat_ms_ago} ms` : '–'),
        h('td', {}, w ? w.step : '–'), h('td', {}, w ? num(w.rate, 2) : '–'), h('td', {}, w && w.straggler ? h('span', { class: 'badge straggler' }, 'straggler') : ''));
    }));
    serverRows.replaceChildren(...j.servers.map((n, i) => h('tr', {}, h('td', {}, i), h('td', {}, n.name || n.id),
      h('td', { class: 'mono' }, n.address || '–'), h('td', {}, n.alive ? 'yes' : h('span', { class: 'error' }, 'no')),
      h('td', {}, n.last_heartbeat_ms_ago !== undefined ? `${n.last_heartbeat_ms_ago} ms` : '–'))));
  }

  // Facts, workers and servers: polled (they are a snapshot, not a history).
  async function poll() {
    const j = await api(path);
    title.replaceChildren('Job ', h('span', { class: 'mono' }, j.id), ' ', h('span', { class: 'muted' }, j.name));
    epochs = j.epochs;
    stepsPerEpoch = j.steps_per_epoch || stepsPerEpoch;
    if (!el['job-state'].dataset.state || !streamed) showState(j.state, j.reason);
    bigBar.style.width = `${Math.min(100, j.percent)}%`;
    el['job-epoch'].textContent = `${j.epoch}/${j.epochs}`;
    el['job-steps'].textContent = `${j.step}/${j.total_steps}`;
    el['job-eta'].textContent = TERMINAL.has(j.state) ? '–' : duration(j.eta_seconds);
    el['job-rate'].textContent = num(j.samples_per_second, 0);
    el['model-link'].replaceChildren(j.model ? h('a', { href: withToken(j.model.href), download: `${j.id}.safetensors`, id: 'download-model' },
      `Download model (${(j.model.bytes / 1e6).toFixed(1)} MB, safetensors)`) : '');
    lastStatus = j;
    renderNodes();
    if (finished && TERMINAL.has(j.state) && stopPoll) { stopPoll(); stopPoll = null; }
  }

  // The curves: the event stream, or, when the coordinator has none, its polled history.
  let streamed = false, source = null, stopHistory = null;
  // Events that arrive before the job's status (which places steps in epochs) wait for it.
  let statusKnown = false;
  const early = [];
  const feed = (type, d) => (statusKnown ? handle(type, d) : early.push([type, d]));
  const types = ['state', 'progress', 'epoch', 'checkpoint', 'backup', 'recovery', 'node', 'note', 'warning'];
  function openStream() {
    const url = `${path}/events${token() ? '?access_token=' + encodeURIComponent(token()) : ''}`;
    source = new EventSource(url);
    streamNote.textContent = 'event stream';
    for (const type of types) {
      source.addEventListener(type, (e) => {
        const seq = Number(e.lastEventId) || 0;
        if (seq && seq <= lastSeq) return;  // seen (a reconnect resumes after Last-Event-ID anyway)
        lastSeq = seq || lastSeq;
        received++;
        streamed = true;
        let d;
        try { d = JSON.parse(e.data); } catch (err) { return; }
        feed(type, d);
        // A finished job's stream ends after its final state: do not let EventSource reconnect.
        if (type === 'state' && TERMINAL.has(d.state)) source.close();
      });
    }
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED && received === 0) {
        source.close();
        historyFallback();
      }
    };
  }

  // Without an event stream (an older coordinator, or a proxy that refuses it): GET .../metrics
  // every 2 s, feeding only the entries not yet seen through the same handler.
  function historyFallback() {
    streamNote.textContent = 'polling (no event stream)';
    let steps = 0, epochsSeen = 0;
    stopHistory = every(POLL_MS, async () => {
      const m = await api(`${path}/metrics`);
      for (; steps < m.steps.length; steps++) feed('progress', m.steps[steps]);
      for (; epochsSeen < m.epochs.length; epochsSeen++) feed('epoch', m.epochs[epochsSeen]);
      if (finished && stopHistory) { stopHistory(); stopHistory = null; }
    });
  }

  // For the browser test's rendering benchmark: feed events and redraw at once.
  window.pstrainJobPage = { handle, draw: () => { clearTimeout(drawTimer); draw(); } };

  let stopPoll = null;
  (async () => {
    openStream();  // at once, beside the first status: the history's replay starts meanwhile
    try {
      await poll();
    } catch (e) {
      if (source) source.close();
      if (stopHistory) stopHistory();
      view.append(h('p', { class: 'error' }, e.status === 404 ? `There is no job '${id}'.` : 'Cannot read the job: ' + e.message));
      return;
    }
    statusKnown = true;
    for (const [type, d] of early.splice(0)) handle(type, d);
    stopPoll = every(POLL_MS, poll);
  })();

  return () => {
    if (stopPoll) stopPoll();
    if (stopHistory) stopHistory();
    if (source) source.close();
    clearTimeout(drawTimer);
    for (const c of Object.values(charts)) if (c) c.destroy();
    delete window.pstrainJobPage;
  };
}

// ---- Cluster --------------------------------------------------------------------------------

function clusterView(view) {
  const body = h('tbody');
  const error = h('p', { class: 'error' });
  view.append(h('h1', {}, 'Cluster'), h('div', { class: 'panel' },
    h('table', { id: 'nodes' }, h('thead', {}, h('tr', {},
      ['Node', 'Role', 'Name', 'Address', 'Alive', 'Last heartbeat', 'Runs', 'Registered'].map((t) => h('th', {}, t)))), body), error));
  return every(POLL_MS, async () => {
    let nodes;
    try {
      nodes = (await api('/v1/cluster')).nodes;
      error.textContent = '';
    } catch (e) {
      error.textContent = 'Cannot read the cluster: ' + e.message;
      return;
    }
    nodes.sort((a, b) => a.role.localeCompare(b.role) || a.id - b.id);
    body.replaceChildren(...nodes.map((n) => h('tr', { 'data-node': n.id, 'data-role': n.role },
      h('td', {}, n.id), h('td', {}, n.role), h('td', {}, n.name), h('td', { class: 'mono' }, n.address || '–'),
      h('td', {}, n.alive ? 'yes' : h('span', { class: 'error' }, 'no')),
      h('td', {}, `${n.last_heartbeat_ms_ago} ms ago`),
      h('td', {}, n.job ? h('a', { href: `#/jobs/${encodeURIComponent(n.job)}`, class: 'mono' }, n.job) : h('span', { class: 'muted' }, 'idle')),
      h('td', {}, ago(n.registered_at_ms)))));
    if (!nodes.length) body.append(h('tr', {}, h('td', { colspan: 8, class: 'muted' }, 'No nodes registered.')));
  });
}

// ---- Submit ---------------------------------------------------------------------------------

// The line of every JSON pointer in `text` (valid JSON): a member's line is its key's.
function pointerLines(text) {
  const lines = new Map();
  let i = 0, line = 1;
  const ws = () => { while (i < text.length && /\s/.test(text[i])) { if (text[i] === '\n') line++; i++; } };
  const str = () => {
    let s = '';
    i++;
    while (i < text.length && text[i] !== '"') {
      if (text[i] === '\\') { s += text[i + 1]; i += 2; } else s += text[i++];
    }
    i++;
    return s;
  };
  const value = (ptr) => {
    ws();
    if (!lines.has(ptr)) lines.set(ptr, line);
    const c = text[i];
    if (c === '{' || c === '[') {
      const close = c === '{' ? '}' : ']';
      i++;
      ws();
      if (text[i] === close) { i++; return; }
      for (let n = 0; i < text.length; n++) {
        ws();
        let p;
        if (c === '{') {
          const keyLine = line;
          p = ptr + '/' + str().replace(/~/g, '~0').replace(/\//g, '~1');
          lines.set(p, keyLine);
          ws();
          i++;  // ':'
        } else {
          p = ptr + '/' + n;
        }
        value(p);
        ws();
        if (text[i++] !== ',') return;
      }
      return;
    }
    if (c === '"') { str(); return; }
    while (i < text.length && !/[,\]}\s]/.test(text[i])) i++;
  };
  try { value(''); } catch (e) { /* partial map */ }
  return lines;
}

// The line a pointer names, or that of its longest existing prefix (a missing member's parent).
function lineOf(text, pointer) {
  const lines = pointerLines(text);
  let p = pointer || '';
  while (p && !lines.has(p)) p = p.slice(0, p.lastIndexOf('/'));
  return lines.get(p) || 1;
}

function submitView(view) {
  const select = h('select', { id: 'spec-file' });
  const textarea = h('textarea', { id: 'spec', spellcheck: 'false', 'aria-label': 'job spec (JSON)' });
  const gutter = h('div', { class: 'gutter', 'aria-hidden': 'true' });
  const bubble = h('div', { class: 'bubble', id: 'field-error', hidden: true });
  const errors = h('ul', { class: 'errors error', id: 'errors' });
  const status = h('span', { class: 'muted', id: 'submit-status' });
  const button = h('button', { class: 'primary', id: 'submit', type: 'submit' }, 'Submit');
  let errorLine = 0;
  view.append(h('h1', {}, 'Submit a job'), h('form', { class: 'panel', id: 'submit-form', onsubmit: submit },
    h('div', { class: 'toolbar' }, h('label', {}, 'Start from ', select), h('span', { style: 'flex:1' }), status, button),
    h('div', { class: 'editor' }, gutter, textarea, bubble), errors));

  const lineHeight = 20, padding = 8;
  function renderGutter() {
    const n = textarea.value.split('\n').length;
    gutter.replaceChildren(...Array.from({ length: n }, (_, k) => h('div', { class: k + 1 === errorLine ? 'bad' : null }, k + 1)));
    gutter.scrollTop = textarea.scrollTop;
    placeBubble();
  }
  function placeBubble() {
    if (!errorLine) { bubble.hidden = true; return; }
    const top = padding + (errorLine - 1) * lineHeight - textarea.scrollTop;
    bubble.hidden = top < 0 || top > textarea.clientHeight - lineHeight;
    bubble.style.top = `${top}px`;
  }
  function showError(line, field, detail) {
    errorLine = line;
    bubble.textContent = detail;
    bubble.dataset.field = field || '';
    bubble.dataset.line = line;
    errors.replaceChildren(h('li', { 'data-field': field || '', 'data-line': line }, `line ${line}${field ? ' · ' + field : ''}: ${detail}`));
    renderGutter();
    // Bring the line into view.
    const top = (line - 1) * lineHeight;
    if (top < textarea.scrollTop || top > textarea.scrollTop + textarea.clientHeight - 2 * lineHeight) {
      textarea.scrollTop = Math.max(0, top - textarea.clientHeight / 2);
    }
    placeBubble();
  }
  function clearError() { errorLine = 0; errors.replaceChildren(); renderGutter(); }
  textarea.addEventListener('input', () => { if (errorLine) clearError(); else renderGutter(); });
  textarea.addEventListener('scroll', () => { gutter.scrollTop = textarea.scrollTop; placeBubble(); });

  async function load(name) {
    try {
      textarea.value = await (await fetch(`/ui/jobs/${encodeURIComponent(name)}`)).text();
    } catch (e) { textarea.value = '{}'; }
    clearError();
  }
  select.addEventListener('change', () => load(select.value));
  (async () => {
    let names = [];
    try { names = (await (await fetch('/ui/jobs/index.json')).json()).specs; } catch (e) { /* none */ }
    select.replaceChildren(...names.map((n) => h('option', { value: n }, n.replace(/\.json$/, ''))));
    const first = names.includes('mnist-mlp.json') ? 'mnist-mlp.json' : names[0];
    if (first) { select.value = first; await load(first); }
    view.dataset.ready = 'true';
  })();

  async function submit(e) {
    e.preventDefault();
    const text = textarea.value;
    try {
      JSON.parse(text);
    } catch (err) {
      const m = /position (\d+)/.exec(err.message) || [];
      const line = m[1] ? text.slice(0, Number(m[1])).split('\n').length : (/line (\d+)/.exec(err.message) || [0, 1])[1];
      showError(Number(line), '', 'not valid JSON: ' + err.message);
      return;
    }
    button.disabled = true;
    status.textContent = 'submitting…';
    try {
      const job = await api('/v1/jobs', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: text });
      status.textContent = `submitted ${job.id}`;
      location.hash = `#/jobs/${encodeURIComponent(job.id)}`;
    } catch (err) {
      status.textContent = '';
      const field = err.problem && err.problem.field;
      showError(field ? lineOf(text, field) : 1, field, err.problem ? `${err.problem.title}: ${err.problem.detail}` : err.message);
    } finally {
      button.disabled = false;
    }
  }
  return () => {};
}

start();
