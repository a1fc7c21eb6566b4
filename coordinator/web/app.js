// pstrain dashboard: one page with hash routes, plain DOM and Chart.js (Debian's libjs-chart.js,
// served by the coordinator at /ui/chart.min.js). No build step, no framework.
//
//   #/jobs        the jobs (polled every 2 s): state, progress, ETA, accuracy, mode, created; cancel
//   #/jobs/ID     one job (job.js): curves fed by its event stream (GET /v1/jobs/ID/events: the history is
//                 replayed, then live events follow); facts, workers and servers polled from
//                 GET /v1/jobs/ID; the timeline of backups, checkpoints, recoveries and node changes
//   #/studies     the studies, and #/studies/ID one study (studies.js): trials, scatter plots, curves
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
  else if (page === 'datasets' && rest.length) stop = datasetView(view, decodeURIComponent(rest.join('/')));
  else if (page === 'datasets') stop = datasetsView(view);
  else if (page === 'studies' && rest.length) stop = studyView(view, decodeURIComponent(rest.join('/')));
  else if (page === 'studies') stop = studiesView(view);
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
