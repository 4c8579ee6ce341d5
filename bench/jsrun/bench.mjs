// The four Run SDK benchmark cases on quickjs-emscripten (the engine the
// Run SDK embeds), built the way the Run SDK runs code: a fresh runtime and
// context per run, the source wrapped in an async function, host functions
// returning promises settled by the host, and for interrupt + resume an
// HMAC-signed ledger replayed in a fresh context. Prints one JSON line per case.
//
//   node bench.mjs [--n 300] [--concurrent 1000]
import { getQuickJS } from 'quickjs-emscripten';
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { args, opt, peakRSS, resetPeak, timeCase } from './measure.mjs';

const N = opt('n', 300);
const CONCURRENT = opt('concurrent', 1000);
const QuickJS = await getQuickJS();
const secret = randomBytes(32);

// run executes source in a fresh context. answer(name, args) returns a value,
// a Promise, or the INTERRUPT marker; returns {status, value}.
const INTERRUPT = Symbol('interrupt');
async function run(source, answer) {
  const rt = QuickJS.newRuntime();
  rt.setMemoryLimit(64 << 20);
  rt.setMaxStackSize(2 << 20);
  const vm = rt.newContext();
  const deferreds = new Set();
  const interruptions = [];
  let onInterrupt;
  const interrupted = new Promise((resolve) => { onInterrupt = resolve; });
  const toHandle = (v) => (typeof v === 'boolean' ? (v ? vm.true : vm.false) : vm.newNumber(v));
  try {
    const ns = vm.newObject();
    for (const name of ['echo', 'approve']) {
      const fn = vm.newFunction(name, (...handles) => {
        const a = handles.map((h) => vm.dump(h));
        const p = vm.newPromise();
        deferreds.add(p);
        Promise.resolve(answer(name, a)).then((v) => {
          if (v === INTERRUPT) {
            interruptions.push({ name, args: a });
            onInterrupt('interrupted');
            return;
          }
          const h = toHandle(v);
          p.resolve(h);
          h.dispose();
          deferreds.delete(p);
          p.dispose();
          rt.executePendingJobs();
        });
        return p.handle;
      });
      vm.setProp(ns, name, fn);
      fn.dispose();
    }
    vm.setProp(vm.global, 'host', ns);
    ns.dispose();
    const result = vm.unwrapResult(vm.evalCode('(async () => {' + source + '\n})()'));
    const settled = vm.resolvePromise(result);
    result.dispose();
    rt.executePendingJobs();
    const out = await Promise.race([settled, interrupted]);
    if (out === 'interrupted') return { status: 'interrupted', interruptions };
    const v = vm.unwrapResult(out);
    const value = vm.dump(v);
    v.dispose();
    return { status: 'completed', value };
  } finally {
    for (const d of deferreds) d.dispose();
    vm.dispose();
    rt.dispose();
  }
}

function sign(state) {
  const body = Buffer.from(JSON.stringify(state)).toString('base64url');
  const mac = createHmac('sha256', secret).update('run.continuation.v1\0' + body).digest('base64url');
  return body + '.' + mac;
}
function verify(token) {
  const [body, mac] = token.split('.');
  const want = createHmac('sha256', secret).update('run.continuation.v1\0' + body).digest();
  if (!timingSafeEqual(Buffer.from(mac, 'base64url'), want)) throw new Error('bad token');
  return JSON.parse(Buffer.from(body, 'base64url').toString());
}

const echo = (name, a) => (name === 'echo' ? a[0] : INTERRUPT);

async function interruptResume() {
  const src = 'const a = await host.echo(1); const ok = await host.approve(a); return ok';
  const ledger = [];
  const first = await run(src, (name, a) => {
    if (name === 'echo') { ledger.push({ name, args: a, value: a[0] }); return a[0]; }
    return INTERRUPT;
  });
  if (first.status !== 'interrupted') throw new Error('expected interrupt');
  const token = sign({ ledger, interruptions: first.interruptions });
  const state = verify(token);
  let i = 0;
  const second = await run(src, (name, a) => {
    const e = state.ledger[i];
    if (e && e.name === name && JSON.stringify(e.args) === JSON.stringify(a)) { i++; return e.value; }
    return true; // the resolution of the interrupted call
  });
  if (second.status !== 'completed' || second.value !== true) throw new Error('bad resume ' + JSON.stringify(second));
}

const cases = {
  bare: async () => {
    const rt = QuickJS.newRuntime();
    const vm = rt.newContext();
    vm.unwrapResult(vm.evalCode('1+1')).dispose();
    vm.dispose();
    rt.dispose();
  },
  fresh: () => run('return 1+1', echo),
  roundtrip: () => run('return await host.echo(1)', echo),
  ten: () => run('let s = 0; for (let i = 0; i < 10; i++) s += await host.echo(i); return s', echo),
  interrupt_resume: interruptResume,
};

for (const [name, fn] of Object.entries(cases)) await timeCase(name, fn, N);

// CONCURRENT runs alive at once, each waiting on a host call.
{
  let release;
  const gate = new Promise((r) => { release = r; });
  let started = 0;
  let allStarted;
  const everyone = new Promise((r) => { allStarted = r; });
  resetPeak();
  const t = process.hrtime.bigint();
  const runs = [];
  for (let j = 0; j < CONCURRENT; j++) {
    runs.push(run('const a = new Array(1000).fill(0).map((_, i) => ({i})); return (await host.echo(' + j + ')) + a.length',
      async (name, a) => { if (++started === CONCURRENT) allStarted(); await gate; return a[0]; }));
  }
  await everyone;
  release();
  const results = await Promise.all(runs);
  const wallMs = Number(process.hrtime.bigint() - t) / 1e6;
  results.forEach((r, j) => { if (r.value !== j + 1000) throw new Error('bad concurrent result'); });
  // Peak RSS of the process since the reset above.
  console.log(JSON.stringify({ case: 'concurrent', n: CONCURRENT, wall_ms: wallMs, rss_mib: peakRSS() }));
}
