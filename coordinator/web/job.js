// pstrain dashboard: the page of one job (#/jobs/ID), loaded before app.js, whose helpers (h,
// api, every, ...) it uses when the router calls jobView. See app.js for the page as a whole.
'use strict';

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
      { label: 'train loss', color: '#1f6feb' }, { label: 'test loss', color: '#cf222e', points: true },
      { label: 'validation loss', color: '#8250df', points: true }]),
    accuracy: lineChart(accuracy.canvas, 'epoch', [
      { label: 'train accuracy', color: '#1f6feb' }, { label: 'test accuracy', color: '#cf222e', points: true },
      { label: 'validation accuracy', color: '#8250df', points: true }],
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
  const data = { trainLoss: [], testLoss: [], trainAcc: [], testAcc: [], valLoss: [], valAcc: [], speed: [] };
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
    // The validation curves only for a job that holds examples out (training.validation_fraction).
    const setVal = (chart, array) => { if (chart) { chart.data.datasets[2].data = array; chart.data.datasets[2].hidden = !array.length; } };
    setVal(charts.loss, data.valLoss); setVal(charts.accuracy, data.valAcc);
    set(charts.speed, 0, data.speed);
    const r = rates();
    if (charts.workers) {
      charts.workers.data.labels = r.map((w) => `worker ${w.worker}`);
      charts.workers.data.datasets[0].data = r.map((w) => w.rate);
      charts.workers.data.datasets[0].backgroundColor = r.map((w) => (w.straggler ? '#cf222e' : '#1f6feb'));
    }
    for (const c of Object.values(charts)) if (c) c.update('none');
    Object.assign(loss.box.dataset, { pointsTrain: data.trainLoss.length, pointsTest: data.testLoss.length, pointsVal: data.valLoss.length });
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
        if (d.val_loss !== undefined) data.valLoss.push({ x: d.epoch, y: d.val_loss });
        if (d.val_accuracy !== undefined) data.valAcc.push({ x: d.epoch, y: d.val_accuracy });
        if (d.val_r2 !== undefined) data.valAcc.push({ x: d.epoch, y: d.val_r2 });
        if (d.test_mae !== undefined) {
          // Regression: R^2 takes the accuracy's place on the chart (both read as "higher is better", at most 1).
          data.testAcc.push({ x: d.epoch, y: d.test_r2 });
          el['final-accuracy'].previousSibling.textContent = 'Test MAE / R\u00b2 (last epoch)';
          el['final-accuracy'].textContent = `${d.test_mae.toFixed(4)} / ${d.test_r2.toFixed(4)}`;
          el['final-accuracy'].dataset.value = d.test_mae;
          el['final-accuracy'].dataset.epoch = d.epoch;
          break;
        }
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
    el['model-link'].replaceChildren(...(j.model ? [
      h('a', { href: withToken(j.model.href), download: `${j.id}.safetensors`, id: 'download-model' },
        `Download model (${(j.model.bytes / 1e6).toFixed(1)} MB, safetensors)`),
      ' · ',
      h('a', { href: withToken(`/v1/models/${j.id}/file?format=onnx`), download: `${j.id}.onnx`, id: 'download-onnx' },
        'ONNX')] : []));
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
