// The Run SDK side of jsrun's parity suite (see parity_test.go): runs every
// case of cases.json through the npm package `run` and writes one JSON result
// per case to the file named by argv[3]. Console output that `run` writes
// to file descriptors 1 and 2 is framed by marker lines on both, so the Go
// side can attribute it to a case and step.
import fs from 'node:fs';
import { createRunner, getHostFunctionContext, RunError } from 'run';

const [, , casesPath, outPath] = process.argv;
const cases = JSON.parse(fs.readFileSync(casesPath, 'utf8'));
const runner = createRunner({ continuationSecret: 'parity-secret-0123456789abcdef0123456789' });

// The host-function catalogue; parity_test.go implements the same functions
// for jsrun.
const hostFunctions = {
  h: {
    echo: (x) => x,
    add: (a, b) => a + b,
    fail: () => { throw new Error('internal detail that must not reach the guest'); },
    userFail: (message) => { throw new RunError(message, 'MY_CODE'); },
    ask: (question) => {
      const c = getHostFunctionContext();
      if (c.resume === undefined) c.interrupt({ question });
      return c.resume.resolution;
    },
    big: (n) => 'x'.repeat(n),
    // hang settles only when the run is cancelled (no timing involved).
    hang: (x) => new Promise((resolve) => getHostFunctionContext().abortSignal.addEventListener('abort', () => resolve(x))),
    ordered: () => ({ b: 1, a: 2, 10: 3, 2: 4, [-1]: 5, '01': 6 }),
    views: () => {
      const buf = new ArrayBuffer(8);
      new Uint8Array(buf).set([1, 2, 3, 4, 5, 6, 7, 8]);
      return { whole: new Uint8Array(buf), mid: new Uint16Array(buf, 2, 2), dv: new DataView(buf, 1, 3), buf };
    },
  },
};

// moduleLoader serves a case's modules; parity_test.go's mapLoader does the
// same for jsrun: "./x" names x, "normalize-fails" fails to resolve, and a
// name the case does not have fails to load (both with internal details).
const moduleLoader = (modules) => ({
  identity: 'parity-v1',
  normalize: (specifier) => {
    if (specifier === 'normalize-fails') throw new Error('internal resolver detail');
    return specifier.startsWith('./') ? specifier.slice(2) : specifier;
  },
  load: (name) => {
    if (!Object.hasOwn(modules, name)) throw new Error('internal loader detail: ' + name);
    return modules[name];
  },
});

// shape describes a value exactly, as parity_test.go's shape does for the
// jsrun side: objects get ids in visiting order, repeats are refs, keys keep
// their order, typed arrays name their buffer and offsets.
function shape(v, ids = new Map()) {
  switch (typeof v) {
    case 'undefined': return { $: 'undefined' };
    case 'boolean': return v;
    case 'bigint': return { $: 'bigint', v: String(v) };
    case 'string': return v.isWellFormed() ? v : { $: 'string', utf16: Array.from({ length: v.length }, (_, i) => v.charCodeAt(i)) };
    case 'number':
      if (Number.isNaN(v)) return { $: 'number', v: 'NaN' };
      if (v === Infinity) return { $: 'number', v: 'Infinity' };
      if (v === -Infinity) return { $: 'number', v: '-Infinity' };
      if (Object.is(v, -0)) return { $: 'number', v: '-0' };
      return v;
    case 'function': return { $: 'function' };
    case 'symbol': return { $: 'symbol' };
  }
  if (v === null) return null;
  if (ids.has(v)) return { $: 'ref', id: ids.get(v) };
  const id = ids.size + 1;
  ids.set(v, id);
  if (Array.isArray(v)) {
    const items = [];
    for (const k of Object.keys(v)) items.push([Number(k), shape(v[k], ids)]);
    return { $: 'array', id, length: v.length, items };
  }
  if (v instanceof Date) { const t = v.getTime(); return { $: 'date', id, v: Number.isNaN(t) ? null : t }; }
  if (v instanceof RegExp) return { $: 'regexp', id, source: v.source, flags: v.flags };
  if (v instanceof Map) return { $: 'map', id, entries: [...v].map(([k, x]) => [shape(k, ids), shape(x, ids)]) };
  if (v instanceof Set) return { $: 'set', id, values: [...v].map((x) => shape(x, ids)) };
  if (v instanceof ArrayBuffer) return { $: 'arraybuffer', id, hex: Buffer.from(v).toString('hex') };
  if (ArrayBuffer.isView(v)) {
    const kind = v instanceof DataView ? 'DataView' : v[Symbol.toStringTag];
    return { $: 'view', id, kind, byteOffset: v.byteOffset, byteLength: v.byteLength, buffer: shape(v.buffer, ids) };
  }
  if (v instanceof Error) {
    const s = { $: 'error', id, name: v.name, message: v.message };
    if (Object.hasOwn(v, 'cause')) s.cause = shape(v.cause, ids);
    if (Object.hasOwn(v, 'errors')) s.errors = shape(v.errors, ids);
    return s;
  }
  const proto = Object.getPrototypeOf(v);
  return { $: 'object', id, null: proto === null, entries: Object.keys(v).map((k) => [k, shape(v[k], ids)]) };
}

const mark = (text) => { fs.writeSync(1, `\u0000${text}\n`); fs.writeSync(2, `\u0000${text}\n`); };

const out = {};
for (const c of cases) {
  const steps = [];
  let continuation;
  const rounds = [undefined, ...(c.resume ?? [])];
  for (let i = 0; i < rounds.length; i++) {
    const input = { source: c.source, hostFunctions, limits: c.limits };
    if (c.sourceType !== undefined) input.sourceType = c.sourceType;
    if (c.modules !== undefined) input.moduleLoader = moduleLoader(c.modules);
    if (rounds[i] !== undefined) {
      input.continuation = continuation;
      input.resolutions = Object.entries(rounds[i]).map(([interruptionId, value]) => ({ interruptionId, value }));
    }
    const step = {};
    mark(`step ${c.name} ${i}`);
    try {
      const res = await runner.run(input);
      step.status = res.status;
      if (res.status === 'completed') step.value = shape(res.value);
      else {
        step.interruptions = res.interruptions.map((x) => ({
          id: x.id, hostFunctionName: x.hostFunctionName, arguments: shape(x.arguments), payload: shape(x.payload),
        }));
        continuation = res.continuation;
      }
    } catch (e) {
      step.status = 'error';
      step.error = { code: e?.code, name: e?.name, message: e?.message, stack: typeof e?.stack === 'string' ? e.stack : '' };
    }
    mark('end');
    steps.push(step);
    if (step.status !== 'interrupted') break;
  }
  out[c.name] = steps;
}
fs.writeFileSync(outPath, JSON.stringify(out));
