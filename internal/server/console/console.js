// Shellgate's web console: one page, routed by the URL's hash, over the
// JSON API (/api/v1) with the key the user typed. Everything the API
// returns is untrusted (command output, file names, prompts): it reaches
// the page only through textContent and attribute setters here, never as
// HTML (the server's CSP enforces it with Trusted Types).
'use strict';

const KEY = 'shellgate.console.key';
const API = '/api/v1';

// ---- small DOM helpers -------------------------------------------------

// h builds an element: h('td', {class: 'num'}, 'text', child, …). Strings
// become text nodes; on* props are listeners; other props are attributes.
function h(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'text') e.textContent = String(v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function main() { return document.getElementById('main'); }

function show(...nodes) {
  main().replaceChildren(...nodes);
}

function errorBox(msg) { return h('div', {class: 'error', role: 'alert'}, msg); }
function notice(msg) { return h('div', {class: 'notice', role: 'status'}, msg); }

function fmtTime(v) {
  if (v === undefined || v === null || v === '') return '';
  if (typeof v === 'number') return new Date(v * 1000).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  return String(v);
}

function fmtUSD(micro) {
  if (typeof micro !== 'number') return '';
  return '$' + (micro / 1e6).toFixed(6);
}

function fmtBytes(n) {
  if (typeof n !== 'number') return '';
  if (n < 1024) return n + ' B';
  if (n < 1 << 20) return (n / 1024).toFixed(1) + ' KiB';
  if (n < 1 << 30) return (n / (1 << 20)).toFixed(1) + ' MiB';
  return (n / (1 << 30)).toFixed(2) + ' GiB';
}

function cls(prefix, v) {
  return typeof v === 'string' && /^[a-z_]{1,32}$/.test(v) ? prefix + '-' + v : '';
}

function props(pairs) {
  const dl = h('dl', {class: 'props'});
  for (const [k, v] of pairs) dl.append(h('dt', {}, k), h('dd', {}, v instanceof Node ? v : String(v ?? '')));
  return dl;
}

// ---- the API -----------------------------------------------------------

class APIError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function key() { return sessionStorage.getItem(KEY) || ''; }

// request calls the API with the key; JSON in and out unless raw.
async function request(method, path, body, raw) {
  const headers = {Authorization: 'Bearer ' + key()};
  const init = {method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error'};
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let r;
  try {
    r = await fetch(API + path, init);
  } catch (e) {
    throw new APIError(0, 'The server could not be reached: ' + e.message);
  }
  if (raw && r.ok) return r;
  const text = await r.text();
  let v = null;
  try { v = text ? JSON.parse(text) : null; } catch (_) { /* not JSON */ }
  if (!r.ok) {
    let msg = v && v.error && typeof v.error.message === 'string' ? v.error.message : text.slice(0, 500);
    throw new APIError(r.status, `${method} ${API}${path}: ${r.status} ${msg}`);
  }
  return v;
}

const api = {
  get: (p) => request('GET', p),
  put: (p, b) => request('PUT', p, b),
  post: (p, b) => request('POST', p, b),
};

// failed shows err in place of the page, or the login page on a 401.
function failed(err) {
  if (err instanceof APIError && err.status === 401) {
    sessionStorage.removeItem(KEY);
    renderLogin('Your key was refused (401). Log in again.');
    return;
  }
  show(errorBox(err.message || String(err)));
}

// download fetches a file's bytes with the key and saves them under name.
async function download(path, name, status) {
  try {
    status.replaceChildren(h('span', {class: 'muted'}, 'Downloading…'));
    const r = await request('GET', path, undefined, true);
    const blob = await r.blob();
    const url = URL.createObjectURL(blob);
    const a = h('a', {href: url});
    a.download = String(name).split('/').pop() || 'download';
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    status.replaceChildren(notice('Downloaded ' + a.download + ' (' + fmtBytes(blob.size) + ').'));
  } catch (e) {
    status.replaceChildren(errorBox(e.message));
  }
}

// ---- login -------------------------------------------------------------

function renderLogin(message) {
  document.getElementById('nav').hidden = true;
  const input = h('input', {type: 'password', id: 'api-key', name: 'key', autocomplete: 'off', required: true, placeholder: 'sk-sg-…', 'aria-label': 'API key'});
  const status = h('div', {id: 'login-status'});
  if (message) status.append(errorBox(message));
  const form = h('form', {class: 'login', id: 'login', onsubmit: async (ev) => {
    ev.preventDefault();
    const k = input.value.trim();
    if (!k) return;
    sessionStorage.setItem(KEY, k);
    status.replaceChildren(h('span', {class: 'muted'}, 'Checking the key…'));
    try {
      await api.get('/containers?limit=1');
    } catch (e) {
      sessionStorage.removeItem(KEY);
      status.replaceChildren(errorBox(e.status === 401 ? 'That key was refused: ' + e.message : e.message));
      return;
    }
    input.value = '';
    if (location.hash === '' || location.hash === '#/login') location.hash = '#/requests';
    else route();
  }},
  h('h1', {}, 'Shellgate console'),
  h('label', {for: 'api-key'}, 'API key of a workspace'),
  input,
  h('button', {type: 'submit', class: 'primary'}, 'Log in'),
  h('p', {class: 'muted'}, 'The key stays in this tab (sessionStorage) and is sent only to this server\'s API.'),
  status);
  show(form);
  input.focus();
}

// ---- requests ----------------------------------------------------------

async function renderRequests(q) {
  const params = new URLSearchParams({limit: '50'});
  for (const k of ['api', 'status', 'has_detections', 'after']) if (q.get(k)) params.set(k, q.get(k));
  const filter = (name, values) => {
    const s = h('select', {name, 'aria-label': name, onchange: () => {
      const n = new URLSearchParams(q);
      n.delete('after');
      if (s.value) n.set(name, s.value); else n.delete(name);
      location.hash = '#/requests?' + n.toString();
    }}, h('option', {value: ''}, 'any ' + name), values.map((v) => h('option', {value: v, selected: q.get(name) === v}, v)));
    return s;
  };
  // The workspace's logging switch (GET/PUT /api/v1/logging).
  const logStatus = h('span', {id: 'logging-status'});
  const showLogging = (st) => {
    const btn = h('button', {type: 'button', id: st.enabled ? 'logging-off' : 'logging-on', onclick: async () => {
      btn.disabled = true;
      try { showLogging(await api.put('/logging', {enabled: !st.enabled})); } catch (e) {
        if (e.status === 401) return failed(e);
        logStatus.replaceChildren(errorBox(e.message));
      }
    }}, st.enabled ? 'Turn logging off' : 'Turn logging on');
    logStatus.replaceChildren(h('span', {class: 'muted'}, st.enabled
      ? `Logging is on: kept ${st.retention_days} days, at most ${fmtBytes(st.max_record_bytes)} a request. `
      : 'Logging is off for this workspace. '), btn);
  };
  const onlyDetections = h('label', {}, h('input', {type: 'checkbox', id: 'has-detections', checked: q.get('has_detections') === 'true', onchange: (ev) => {
    const n = new URLSearchParams(q);
    n.delete('after');
    if (ev.target.checked) n.set('has_detections', 'true'); else n.delete('has_detections');
    location.hash = '#/requests?' + n.toString();
  }}), ' with detections only');
  const head = [
    h('h1', {}, 'Requests'),
    h('div', {class: 'toolbar'},
      filter('api', ['responses', 'messages', 'chat_completions', 'gemini']),
      filter('status', ['completed', 'incomplete', 'failed', 'blocked']),
      onlyDetections, logStatus),
  ];
  api.get('/logging').then(showLogging, (e) => logStatus.replaceChildren(errorBox(e.message)));
  show(...head, h('p', {class: 'muted'}, 'Loading…'));
  let list;
  try {
    list = await api.get('/logs?' + params.toString());
  } catch (e) {
    if (e.status === 401) return failed(e);
    show(...head, errorBox(e.message));
    return;
  }
  const rows = (list.data || []).map((r) => h('tr', {'data-id': r.id},
    h('td', {}, h('a', {href: '#/requests/' + encodeURIComponent(r.id)}, fmtTime(r.created_at))),
    h('td', {}, r.api), h('td', {}, r.model),
    h('td', {class: cls('status', r.status)}, r.status), h('td', {class: 'num'}, r.http_status),
    h('td', {class: 'num'}, r.duration_ms), h('td', {class: 'num'}, r.usage ? r.usage.input_tokens : ''),
    h('td', {class: 'num'}, r.usage ? r.usage.output_tokens : ''), h('td', {class: 'num'}, fmtUSD(r.cost_micro_usd)),
    h('td', {class: 'num'}, r.tool_calls), h('td', {class: 'num'}, Array.isArray(r.detections) ? r.detections.length : r.detections),
    h('td', {}, r.container_id ? h('a', {href: '#/containers/' + encodeURIComponent(r.container_id)}, r.container_id) : '')));
  const table = h('table', {id: 'requests'},
    h('thead', {}, h('tr', {}, ['Time (UTC)', 'API', 'Model', 'Status', 'HTTP', 'ms', 'In tok', 'Out tok', 'Cost', 'Tools', 'Detections', 'Container']
      .map((t, i) => h('th', {class: i >= 4 && i <= 10 ? 'num' : ''}, t)))),
    h('tbody', {}, rows));
  const more = [];
  if (list.has_more && list.last_id) {
    const n = new URLSearchParams(q);
    n.set('after', list.last_id);
    more.push(h('a', {href: '#/requests?' + n.toString(), id: 'older'}, 'Older requests →'));
  }
  const filtered = ['api', 'status', 'has_detections'].some((k) => q.get(k));
  const none = h('p', {class: 'muted', id: 'no-requests'}, filtered ? 'No logged request matches.'
    : 'No logged requests. Requests are logged once logging is on for the workspace.');
  show(...head, rows.length ? table : none, ...more);
}

function pre(text, klass) {
  return h('pre', {class: klass}, text === undefined || text === null ? '' : String(text));
}

async function renderRequest(id) {
  let r;
  try { r = await api.get('/logs/' + encodeURIComponent(id)); } catch (e) { return failed(e); }
  const u = r.usage || {};
  const out = [
    h('p', {}, h('a', {href: '#/requests'}, '← Requests')),
    h('h1', {}, 'Request ', h('code', {}, r.request_id || r.id)),
    props([
      ['Time (UTC)', fmtTime(r.created_at)], ['API', r.api], ['Model', r.model],
      ['Status', h('span', {class: cls('status', r.status)}, r.status)], ['HTTP status', r.http_status],
      ['Duration', (r.duration_ms ?? '') + ' ms'],
      ['Tokens', `${u.input_tokens ?? 0} in, ${u.output_tokens ?? 0} out`],
      ['Cost', fmtUSD(r.cost_micro_usd)], ['Tool calls', r.tool_calls],
      ['Container', r.container_id ? h('a', {href: '#/containers/' + encodeURIComponent(r.container_id)}, r.container_id) : '—'],
      ['Truncated', r.truncated ? 'yes: the record was cut at the size cap' : 'no'],
    ]),
  ];
  if (r.error) out.push(h('h2', {}, 'Error'), pre(r.error, 'error-text'));
  const dets = Array.isArray(r.detections) ? r.detections : [];
  out.push(h('h2', {}, `Guardrail detections (${dets.length})`));
  if (dets.length) {
    out.push(h('table', {id: 'detections'},
      h('thead', {}, h('tr', {}, ['Rule', 'Technique', 'Action', 'Guardrail', 'Where', 'Excerpt'].map((t) => h('th', {}, t)))),
      h('tbody', {}, dets.map((d) => h('tr', {},
        h('td', {}, d.rule), h('td', {}, d.technique), h('td', {class: cls('status', d.action)}, d.action),
        h('td', {}, d.guardrail), h('td', {}, d.location), h('td', {}, h('code', {}, d.excerpt)))))));
  }
  out.push(h('h2', {}, 'Input'));
  for (const m of r.input || []) out.push(h('div', {class: 'item input'}, h('h3', {}, m.role), pre(m.text)));
  out.push(h('h2', {}, 'Items'));
  for (const it of r.items || []) {
    if (it.type === 'command') {
      out.push(h('div', {class: 'item command', 'data-call-id': it.call_id},
        h('h3', {}, 'Command · outcome ', h('span', {class: cls('outcome', it.outcome)}, it.outcome),
          ` · exit code ${it.exit_code ?? '—'} · ${it.duration_ms ?? '?'} ms`),
        pre(it.command, 'command'),
        h('div', {class: 'muted'}, 'stdout'), pre(it.stdout, 'stdout'),
        it.stderr ? [h('div', {class: 'muted'}, 'stderr'), pre(it.stderr, 'stderr')] : null));
    } else {
      out.push(h('div', {class: 'item message'}, h('h3', {}, it.role || it.type), pre(it.text)));
    }
  }
  if (r.output !== undefined && r.output !== null) {
    out.push(h('h2', {}, 'Output'));
    out.push(pre(typeof r.output === 'string' ? r.output : JSON.stringify(r.output, null, 2), 'output'));
  }
  show(...out);
}

// ---- containers and files ----------------------------------------------

// pageOf fetches one page of the list at path: up to limit items after
// the cursor in q ("after").
function pageOf(path, q, limit) {
  const params = new URLSearchParams({limit: String(limit)});
  if (q.get('after')) params.set('after', q.get('after'));
  return api.get(path + '?' + params.toString());
}

// listTable is a page of a list: the table (id) of its rows under the
// header cells, or the empty note when there are none, then a link to the
// next page (next + the last id, labelled more) when the list has more.
function listTable(list, rows, {id, heads, empty, next, more = 'More →'}) {
  const out = [rows.length ? h('table', {id}, h('thead', {}, h('tr', {}, heads)), h('tbody', {}, rows))
    : h('p', {class: 'muted'}, empty)];
  if (list.has_more && list.last_id) out.push(h('a', {href: next + encodeURIComponent(list.last_id)}, more));
  return out;
}

async function renderContainers(q) {
  let list;
  try { list = await pageOf('/containers', q, 100); } catch (e) { return failed(e); }
  const rows = (list.data || []).map((c) => h('tr', {'data-id': c.id},
    h('td', {}, h('a', {href: '#/containers/' + encodeURIComponent(c.id)}, c.name || c.id)),
    h('td', {}, h('code', {}, c.id)), h('td', {class: cls('status', c.status)}, c.status),
    h('td', {}, fmtTime(c.created_at)), h('td', {}, fmtTime(c.last_active_at))));
  show(h('h1', {}, 'Containers'), ...listTable(list, rows, {id: 'containers',
    heads: ['Name', 'Id', 'Status', 'Created (UTC)', 'Last active (UTC)'].map((t) => h('th', {}, t)),
    empty: 'No containers in this workspace.', next: '#/containers?after='}));
}

async function renderContainer(id, q) {
  const enc = encodeURIComponent(id);
  let c;
  try { c = await api.get('/containers/' + enc); } catch (e) { return failed(e); }
  const status = h('div', {id: 'file-status'});
  const out = [
    h('p', {}, h('a', {href: '#/containers'}, '← Containers')),
    h('h1', {}, 'Container ', h('code', {}, c.name || c.id)),
    props([['Id', c.id], ['Status', h('span', {class: cls('status', c.status)}, c.status)],
      ['Created (UTC)', fmtTime(c.created_at)], ['Last active (UTC)', fmtTime(c.last_active_at)],
      ['Expires (UTC)', fmtTime(c.expires_at)], ['Memory', c.memory_limit],
      ['Network', c.network_policy ? c.network_policy.type : '']]),
    h('h2', {}, 'Files'), status,
  ];
  if (c.status === 'expired') {
    out.push(h('p', {class: 'muted'}, 'This container expired: its files were deleted.'));
    show(...out);
    return;
  }
  show(...out, h('p', {class: 'muted'}, 'Loading files…'));
  let list;
  try { list = await pageOf(`/containers/${enc}/files`, q, 200); } catch (e) {
    if (e.status === 401) return failed(e);
    show(...out, errorBox(e.message));
    return;
  }
  const rows = (list.data || []).map((f) => {
    const fenc = encodeURIComponent(f.id);
    return h('tr', {'data-file-id': f.id},
      h('td', {class: 'path'}, h('code', {}, f.path)), h('td', {class: 'num'}, fmtBytes(f.bytes)),
      h('td', {}, fmtTime(f.created_at)), h('td', {}, f.source),
      h('td', {},
        h('button', {type: 'button', class: 'download', onclick: () => download(`/containers/${enc}/files/${fenc}/content`, f.path, status)}, 'Download'),
        ' ',
        h('button', {type: 'button', class: 'promote', onclick: async (ev) => {
          ev.target.disabled = true;
          status.replaceChildren(h('span', {class: 'muted'}, 'Promoting ' + f.path + '…'));
          try {
            const wf = await api.post(`/containers/${enc}/files/${fenc}/promote`);
            status.replaceChildren(notice(`Promoted ${f.path} to workspace file ${wf.id} (${wf.filename}).`),
              h('a', {href: '#/files', id: 'to-files'}, 'Open workspace files →'));
          } catch (e) {
            status.replaceChildren(errorBox(e.message));
          } finally { ev.target.disabled = false; }
        }}, 'Promote')));
  });
  show(...out, ...listTable(list, rows, {id: 'files',
    heads: ['Path', 'Size', 'Modified (UTC)', 'Source', ''].map((t, i) => h('th', {class: i === 1 ? 'num' : ''}, t)),
    empty: 'No files in the container\'s home.', next: `#/containers/${enc}?after=`, more: 'More files →'}));
}

async function renderFiles(q) {
  let list;
  try { list = await pageOf('/files', q, 100); } catch (e) { return failed(e); }
  const status = h('div', {id: 'file-status'});
  const rows = (list.data || []).map((f) => h('tr', {'data-file-id': f.id},
    h('td', {class: 'filename'}, h('code', {}, f.filename)), h('td', {}, h('code', {}, f.id)),
    h('td', {class: 'num'}, fmtBytes(f.size_bytes)), h('td', {}, f.mime_type), h('td', {}, fmtTime(f.created_at)),
    h('td', {}, f.downloadable === false ? '' : h('button', {type: 'button', class: 'download',
      onclick: () => download(`/files/${encodeURIComponent(f.id)}/content`, f.filename, status)}, 'Download'))));
  show(h('h1', {}, 'Workspace files'), status, ...listTable(list, rows, {id: 'workspace-files',
    heads: ['Name', 'Id', 'Size', 'Type', 'Created', ''].map((t, i) => h('th', {class: i === 2 ? 'num' : ''}, t)),
    empty: 'No workspace files.', next: '#/files?after='}));
}

// ---- usage -------------------------------------------------------------

async function renderUsage(q) {
  const params = new URLSearchParams();
  for (const k of ['from', 'to']) if (q.get(k)) params.set(k, q.get(k));
  const from = h('input', {type: 'date', name: 'from', value: q.get('from') || '', 'aria-label': 'from'});
  const to = h('input', {type: 'date', name: 'to', value: q.get('to') || '', 'aria-label': 'to'});
  const form = h('form', {class: 'toolbar', onsubmit: (ev) => {
    ev.preventDefault();
    const n = new URLSearchParams();
    if (from.value) n.set('from', from.value);
    if (to.value) n.set('to', to.value);
    location.hash = '#/usage?' + n.toString();
  }}, 'From', from, 'to', to, h('button', {type: 'submit'}, 'Show'));
  let u;
  try { u = await api.get('/usage?' + params.toString()); } catch (e) {
    if (e.status === 401) return failed(e);
    show(h('h1', {}, 'Usage'), form, errorBox(e.message));
    return;
  }
  if (!from.value) from.value = u.from;
  if (!to.value) to.value = u.to;
  const days = u.by_day || [];
  const max = Math.max(1, ...days.map((d) => d.cost_micro_usd || 0));
  const line = (d, label) => h('tr', {},
    h('td', {}, label), h('td', {class: 'num'}, d.events), h('td', {class: 'num'}, d.metered_ms),
    h('td', {class: 'num'}, d.billed_ms), h('td', {class: 'num'}, '$' + (d.cost_usd ?? '')),
    h('td', {}, label === 'Total' ? '' : h('meter', {min: 0, max, value: d.cost_micro_usd || 0})));
  const table = h('table', {id: 'usage'},
    h('thead', {}, h('tr', {}, ['Day (UTC)', 'Events', 'Metered ms', 'Billed ms', 'Cost', ''].map((t, i) => h('th', {class: i >= 1 && i <= 4 ? 'num' : ''}, t)))),
    h('tbody', {}, days.map((d) => line(d, d.day))),
    h('tfoot', {}, line(u.total || {}, 'Total')));
  show(h('h1', {}, 'Usage by day'), form, h('p', {class: 'muted'}, `Sandbox time billed to this workspace, ${u.from} to ${u.to}.`),
    days.length ? table : h('p', {class: 'muted'}, 'No usage in this range.'));
}

// ---- guardrails --------------------------------------------------------

let metaCache = null;
async function meta() {
  if (!metaCache) {
    const r = await fetch('/console/meta.json', {cache: 'no-store'});
    if (!r.ok) throw new Error('console/meta.json: ' + r.status);
    metaCache = await r.json();
  }
  return metaCache;
}

async function renderGuardrails() {
  let g, m;
  try { [g, m] = await Promise.all([api.get('/guardrails'), meta()]); } catch (e) { return failed(e); }
  const list = h('div', {id: 'guardrails'});
  const status = h('div', {id: 'guardrail-status'});
  const addRow = (gr) => {
    const name = h('input', {type: 'text', class: 'name', value: gr.name || '', 'aria-label': 'name', required: true, maxlength: 64});
    const action = h('select', {class: 'action', 'aria-label': 'action'}, m.actions.map((a) => h('option', {value: a, selected: gr.action === a}, a)));
    const techs = h('div', {class: 'techniques'}, m.techniques.map((t) => h('label', {},
      h('input', {type: 'checkbox', value: t, checked: (gr.techniques || []).includes(t)}), ' ', t)));
    const row = h('div', {class: 'guardrail'}, name, action,
      h('div', {}, techs, h('div', {class: 'muted'}, 'No technique ticked: every technique.')),
      h('button', {type: 'button', class: 'remove', onclick: () => row.remove()}, 'Remove'));
    row.value = () => {
      const out = {name: name.value.trim(), type: 'prompt_injection', action: action.value};
      const ts = [...techs.querySelectorAll('input:checked')].map((i) => i.value);
      if (ts.length) out.techniques = ts;
      return out;
    };
    list.append(row);
  };
  for (const gr of g.guardrails || []) addRow(gr);
  const form = h('form', {id: 'guardrail-form', onsubmit: async (ev) => {
    ev.preventDefault();
    const body = {guardrails: [...list.children].map((r) => r.value())};
    try {
      const saved = await api.put('/guardrails', body);
      status.replaceChildren(notice(`Saved ${saved.guardrails.length} guardrail(s).`));
    } catch (e) {
      if (e.status === 401) return failed(e);
      status.replaceChildren(errorBox(e.message));
    }
  }},
  list,
  h('div', {class: 'toolbar'},
    h('button', {type: 'button', id: 'add-guardrail', onclick: () => addRow({action: 'flag'})}, 'Add a guardrail'),
    h('button', {type: 'submit', class: 'primary'}, 'Save')),
  status);
  show(h('h1', {}, 'Guardrails'),
    h('p', {class: 'muted'}, `Prompt-injection screening of this workspace's gateway requests (detector ${g.detector || m.detector}). ` +
      'When several apply, the strictest action wins: block > redact > flag.'),
    form);
}

// ---- routing -----------------------------------------------------------

async function route() {
  if (!key()) return renderLogin();
  document.getElementById('nav').hidden = false;
  try {
    const [pathPart, query] = (location.hash.replace(/^#/, '') || '/requests').split('?');
    const q = new URLSearchParams(query || '');
    const parts = pathPart.split('/').filter(Boolean).map(decodeURIComponent);
    const page = parts[0] || 'requests';
    for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('current', a.dataset.page === page);
    show(h('p', {class: 'muted'}, 'Loading…'));
    switch (page) {
      case 'requests': return parts[1] ? await renderRequest(parts[1]) : await renderRequests(q);
      case 'containers': return parts[1] ? await renderContainer(parts[1], q) : await renderContainers(q);
      case 'files': return await renderFiles(q);
      case 'usage': return await renderUsage(q);
      case 'guardrails': return await renderGuardrails();
      case 'login': return renderLogin();
      default: show(errorBox('No such page.'));
    }
  } catch (e) {
    failed(e);
  }
}

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('logout').addEventListener('click', () => {
    sessionStorage.removeItem(KEY);
    location.hash = '#/login';
    renderLogin();
  });
  window.addEventListener('hashchange', route);
  route();
});
