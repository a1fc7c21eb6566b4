// pstrain dashboard: the datasets pages (app.js's router calls them; helpers h, api, num, ago
// come from app.js). #/datasets lists the catalog; #/datasets/NAME shows one dataset and, for a
// table (a CSV or JSON Lines upload), the profile of each split: per column its type, missing
// count, min/max/mean/std or most frequent values, as GET /v1/datasets/NAME gives them.

function datasetsView(view) {
  const body = h('tbody');
  const error = h('p', { class: 'error' });
  view.append(h('h1', {}, 'Datasets'), h('div', { class: 'panel' },
    h('table', { id: 'datasets' }, h('thead', {}, h('tr', {},
      ['Dataset', 'Task', 'Input', 'Classes', 'Train', 'Test', 'Source', 'State'].map(
        (t, i) => h('th', { class: [4, 5].includes(i) ? 'num' : null }, t)))), body), error));
  return every(POLL_MS, async () => {
    let list;
    try {
      list = (await api('/v1/datasets')).datasets;
      error.textContent = '';
    } catch (e) {
      error.textContent = 'Cannot list datasets: ' + e.message;
      return;
    }
    body.replaceChildren(...list.map((d) => h('tr', { 'data-dataset': d.name },
      h('td', { class: 'mono' }, h('a', { href: `#/datasets/${encodeURIComponent(d.name)}` }, d.name)),
      h('td', {}, d.columns ? `${d.task} (table)` : d.task),
      h('td', { class: 'mono' }, JSON.stringify(d.input_shape)),
      h('td', {}, d.class_names ? d.class_names.join(', ') : d.num_classes || '–'),
      h('td', { class: 'num' }, d.splits.train ? d.splits.train.examples : '–'),
      h('td', { class: 'num' }, d.splits.test ? d.splits.test.examples : '–'),
      h('td', {}, d.source),
      h('td', {}, d.state))));
    if (!list.length) body.append(h('tr', {}, h('td', { colspan: 8, class: 'muted' }, 'No datasets.')));
  });
}

// A text profile's most frequent tokens (text columns, documents), as a cell.
function topTokens(text) {
  const top = text.top_tokens.slice(0, 5);
  return h('td', { 'data-top-tokens': JSON.stringify(top.map(([t]) => t)) },
    top.map(([t, n]) => `${t} (${n})`).join(', ') + ` … in ${text.documents} documents (mean tokens per document)`);
}

// A split of text documents: its size, tokens per document (a histogram) and top tokens.
function textPanel(split, text) {
  const per = text.tokens_per_document;
  const facts = [['Tokens', num(text.tokens, 0)], ['Tokens per document', `min ${per.min}, mean ${num(per.mean, 1)}, max ${per.max}`],
                 ['Distinct tokens', num(text.distinct_tokens, 0) + (text.distinct_tokens_capped ? ' (counting stopped there)' : '')]];
  const histogram = per.histogram.filter((b) => b.documents > 0).map((b) => `≤ ${b.at_most}: ${b.documents}`).join(', ');
  return h('div', { class: 'panel', 'data-split': split, 'data-documents': text.documents },
    h('h2', {}, `${split}: ${num(text.documents, 0)} documents`),
    h('table', {}, h('tbody', {},
      facts.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v))),
      h('tr', {}, h('th', {}, 'Documents by tokens'), h('td', {}, histogram)),
      h('tr', {}, h('th', {}, 'Most frequent'), topTokens(text)))));
}

// One split's profile table: a row per column.
function profileTable(split, table) {
  const figure = (x) => (x === null || x === undefined ? '–' : Math.abs(x) >= 1000 || Number.isInteger(x) ? num(x, 0) : num(x, 3));
  const rows = table.columns.map((c) => h('tr', { 'data-column': c.name, 'data-type': c.type },
    h('td', { class: 'mono' }, c.name),
    h('td', {}, c.type),
    h('td', { class: 'num', 'data-missing': c.missing }, c.missing),
    h('td', { class: 'num' }, c.type === 'numeric' ? figure(c.min) : ''),
    h('td', { class: 'num' }, c.type === 'numeric' ? figure(c.max) : ''),
    h('td', { class: 'num' }, c.type === 'numeric' ? figure(c.mean) : c.text ? figure(c.text.tokens_per_document.mean) : ''),
    h('td', { class: 'num' }, c.type === 'numeric' ? figure(c.std) : ''),
    c.text ? topTokens(c.text)
      : h('td', {}, (c.top || []).slice(0, 5).map((t) => `${t.value} (${t.count})`).join(', ') +
        (c.distinct > 5 ? ` … ${c.distinct} in all` : ''))));
  return h('div', { class: 'panel', 'data-split': split },
    h('h2', {}, `${split}: ${table.rows} rows`),
    h('table', { class: 'profile' }, h('thead', {}, h('tr', {},
      ['Column', 'Type', 'Missing', 'Min', 'Max', 'Mean', 'Std', 'Most frequent'].map(
        (t, i) => h('th', { class: [2, 3, 4, 5, 6].includes(i) ? 'num' : null }, t)))), h('tbody', {}, rows)));
}

function datasetView(view, name) {
  const error = h('p', { class: 'error' });
  const content = h('div');
  view.append(h('h1', {}, 'Dataset ', h('span', { class: 'mono' }, name)), content, error);
  (async () => {
    let d;
    try {
      d = await api(`/v1/datasets/${encodeURIComponent(name)}`);
    } catch (e) {
      error.textContent = 'Cannot read the dataset: ' + e.message;
      return;
    }
    const facts = [['Task', d.task], ['Input', JSON.stringify(d.input_shape) + ' ' + d.dtype], ['Source', d.source],
                   ['Created', ago(d.created_ms)], ['Used by', (d.used_by || []).join(', ') || 'no job']];
    if (d.label) facts.splice(1, 0, ['Label', d.label]);
    if (d.class_names) facts.splice(2, 0, ['Classes', d.class_names.join(', ')]);
    content.append(h('div', { class: 'panel' }, h('table', {}, h('tbody', {},
      facts.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v)))))));
    for (const split of ['train', 'test']) {
      const s = d.splits[split];
      if (s && s.table) content.append(profileTable(split, s.table));
      if (s && s.text) content.append(textPanel(split, s.text));
    }
    if (!d.columns && d.dtype !== 'string') content.append(h('p', { class: 'muted' }, 'Arrays or images: no column profile.'));
    view.dataset.ready = 'true';
  })();
}
