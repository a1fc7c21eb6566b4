// pstrain dashboard: the studies pages (app.js's router calls them; helpers h, api, num, ago, badge,
// every come from app.js). #/studies lists the studies; #/studies/ID shows one (polled from
// GET /v1/studies/ID): its facts and best trial, the trials table (the best row highlighted), the
// metric against each parameter as a scatter plot, and the metric over epochs per trial.
//
// For the browser test: #study-state has data-state; each scatter's container has data-points;
// #chart-study-epochs has data-series (trials drawn); the best trial's row has data-best.

const TRIAL_COLORS = ['#0969da', '#8250df', '#bf3989', '#cf222e', '#bc4c00', '#4d2d00', '#1a7f37', '#116329', '#57606a'];

function studiesView(view) {
  const body = h('tbody');
  const error = h('p', { class: 'error' });
  view.append(h('h1', {}, 'Studies'), h('div', { class: 'panel' },
    h('table', { id: 'studies' }, h('thead', {}, h('tr', {},
      ['Study', 'Name', 'State', 'Algorithm', 'Metric', 'Trials', 'Best', 'Created'].map((t) => h('th', {}, t)))), body), error),
    h('p', { class: 'muted' }, 'Submit a study with POST /v1/studies or `pstrain study submit` (docs/STUDIES.md).'));
  return every(POLL_MS, async () => {
    let list;
    try {
      list = (await api('/v1/studies')).studies;
      error.textContent = '';
    } catch (e) {
      error.textContent = 'Cannot list studies: ' + e.message;
      return;
    }
    body.replaceChildren(...list.map((s) => h('tr', { 'data-study': s.id },
      h('td', { class: 'mono' }, h('a', { href: `#/studies/${encodeURIComponent(s.id)}` }, s.id)),
      h('td', {}, s.name),
      h('td', {}, badge(s.state)),
      h('td', {}, s.algorithm),
      h('td', {}, `${s.metric} (${s.mode})`),
      h('td', { class: 'num' }, `${s.trials}/${s.max_trials}`),
      h('td', { class: 'num' }, s.best ? num(s.best.metric, 4) : '–'),
      h('td', {}, ago(s.created_ms)))));
    if (!list.length) body.append(h('tr', {}, h('td', { colspan: 8, class: 'muted' }, 'No studies.')));
  });
}

const paramName = (pointer) => pointer.split('/').pop().replace(/~1/g, '/').replace(/~0/g, '~');

function studyView(view, id) {
  const error = h('p', { class: 'error' });
  const state = h('span', { id: 'study-state' });
  const facts = h('tbody');
  const trialsBody = h('tbody');
  const scatterBox = h('div', { class: 'charts' });
  const epochCanvas = h('canvas', { id: 'canvas-study-epochs' });
  const epochBox = h('div', { class: 'chart', id: 'chart-study-epochs' }, h('h2', {}, 'Metric over epochs, per trial'),
    h('div', { class: 'canvas' }, epochCanvas));
  view.append(h('h1', {}, 'Study ', h('span', { class: 'mono' }, id), ' ', state),
    h('div', { class: 'panel' }, h('table', {}, facts)), scatterBox, h('div', { class: 'charts' }, epochBox),
    h('div', { class: 'panel' }, h('h2', {}, 'Trials'), h('table', { id: 'trials' }, h('thead', {}, h('tr', {},
      ['Trial', 'State', 'Parameters', 'Epochs', 'Metric', 'Worker-s', 'Job'].map((t) => h('th', {}, t)))), trialsBody)),
    error);
  const scatters = new Map();  // pointer -> {chart, box}
  let epochChart = null;

  function scatter(pointer, metric) {
    if (scatters.has(pointer) || !window.Chart) return scatters.get(pointer);
    const canvas = h('canvas');
    const box = h('div', { class: 'chart', 'data-param': pointer }, h('h2', {}, `${metric} against ${paramName(pointer)}`),
      h('div', { class: 'canvas' }, canvas));
    scatterBox.append(box);
    const chart = new Chart(canvas, {
      type: 'scatter',
      data: { datasets: [{ label: 'trials', data: [], pointRadius: [], backgroundColor: [] }] },
      options: { animation: false, responsive: true, maintainAspectRatio: false, plugins: { legend: { display: false } },
        scales: { x: { title: { display: true, text: paramName(pointer) } }, y: { title: { display: true, text: metric } } } },
    });
    scatters.set(pointer, { chart, box });
    return scatters.get(pointer);
  }

  function draw(s) {
    state.replaceChildren(badge(s.state));
    state.dataset.state = s.state;
    const best = s.best ? s.best.trial : -1;
    const rows = [['Name', s.name], ['Algorithm', s.algorithm + (s.rungs ? ` (rungs at ${s.rungs.join(', ')} epochs)` : '')],
      ['Metric', `${s.metric} (${s.mode})`], ['Trials', Object.entries(s.trial_counts).map(([k, v]) => `${v} ${k}`).join(', ') || '–'],
      ['Used', `${num(s.worker_seconds, 0)} worker-seconds, ${num(s.node_seconds, 0)} node-seconds`],
      ['Best', s.best ? `trial ${s.best.trial}: ${num(s.best.metric, 4)} at ${s.best.epochs} epochs` : '–']];
    facts.replaceChildren(...rows.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v))));
    if (s.best) {
      facts.append(h('tr', {}, h('th', {}, 'Best model'), h('td', {},
        h('a', { href: `#/jobs/${encodeURIComponent(s.best.job)}`, class: 'mono', id: 'best-model' }, s.best.model))));
    }
    if (s.reason) facts.append(h('tr', {}, h('th', {}, 'Reason'), h('td', {}, s.reason)));
    trialsBody.replaceChildren(...s.trials.map((t) => h('tr', { 'data-trial': t.number, 'data-best': t.number === best ? 'true' : null,
      class: t.number === best ? 'best' : null },
      h('td', { class: 'num' }, t.number),
      h('td', {}, badge(t.state)),
      h('td', { class: 'mono' }, Object.entries(t.parameters).map(([k, v]) => `${paramName(k)}=${typeof v === 'number' ? +v.toPrecision(4) : JSON.stringify(v)}`).join(' ')),
      h('td', { class: 'num' }, t.epochs),
      h('td', { class: 'num' }, t.metric === null ? '–' : num(t.metric, 4)),
      h('td', { class: 'num' }, num(t.worker_seconds, 0)),
      h('td', { class: 'mono' }, t.job ? h('a', { href: `#/jobs/${encodeURIComponent(t.job)}` }, t.job) : '–'))));
    if (!window.Chart) return;
    // Metric against each numeric parameter (a choice of strings: its index).
    const pointers = Object.keys(s.request.search_space);
    for (const p of pointers) {
      const sc = scatter(p, s.metric);
      const done = s.trials.filter((t) => t.metric !== null);
      const x = (v) => (typeof v === 'number' ? v : s.request.search_space[p].choice ? s.request.search_space[p].choice.findIndex((c) => JSON.stringify(c) === JSON.stringify(v)) : 0);
      const ds = sc.chart.data.datasets[0];
      ds.data = done.map((t) => ({ x: x(t.parameters[p]), y: t.metric }));
      ds.pointRadius = done.map((t) => (t.number === best ? 7 : 4));
      ds.backgroundColor = done.map((t) => (t.number === best ? '#1a7f37' : '#0969da'));
      sc.chart.options.scales.x.type = s.request.search_space[p].loguniform ? 'logarithmic' : 'linear';
      sc.chart.update('none');
      sc.box.dataset.points = String(ds.data.length);
    }
    // Metric over epochs: the study's metric where the history has it, else the test loss.
    const key = s.trials.some((t) => t.history.some((e) => e[s.metric] !== undefined)) ? s.metric : 'test_loss';
    if (!epochChart) {
      epochChart = new Chart(epochCanvas, { type: 'line', data: { datasets: [] },
        options: { animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
          plugins: { legend: { labels: { boxWidth: 12 } } },
          scales: { x: { type: 'linear', title: { display: true, text: 'epoch' } }, y: { title: { display: true, text: key } } } } });
    }
    epochChart.data.datasets = s.trials.filter((t) => t.history.length).map((t) => ({
      label: `trial ${t.number}${t.number === best ? ' (best)' : ''}`,
      data: t.history.map((e) => ({ x: e.epoch, y: e[key] })),
      borderColor: t.number === best ? '#1a7f37' : TRIAL_COLORS[t.number % TRIAL_COLORS.length],
      borderWidth: t.number === best ? 3 : 1.2, pointRadius: 2, tension: 0,
    }));
    epochChart.update('none');
    epochBox.dataset.series = String(epochChart.data.datasets.length);
  }

  return every(POLL_MS, async () => {
    let s;
    try {
      s = await api(`/v1/studies/${encodeURIComponent(id)}`);
      error.textContent = '';
    } catch (e) {
      error.textContent = 'Cannot read the study: ' + e.message;
      return;
    }
    draw(s);
    view.dataset.ready = 'true';
  });
}
