// The same benchmark cases as bench.mjs, through the Run SDK itself (the npm
// package `run`, pinned in package.json) and its own API: createRunner,
// host functions, getHostFunctionContext().interrupt and a signed
// continuation resumed with a resolution. `run` executes each invocation in a
// fresh QuickJS context on a pooled worker thread. Prints one JSON line per
// case, like bench.mjs.
//
//   node run.mjs [--n 300] [--concurrent 200]
import { args, opt, peakRSS, resetPeak, timeCase } from './measure.mjs';
import { createRunner, getHostFunctionContext, setMaxWorkers } from 'run';

const N = opt('n', 300);
const CONCURRENT = opt('concurrent', 200);

// Every concurrent run holds a worker thread while it waits on its host
// call; the default cap (≤ 32, by free memory) would reject the rest with
// RUN_CONCURRENCY_LIMIT, so the cap is raised to the number of runs.
setMaxWorkers(Math.max(CONCURRENT, 32));
const runner = createRunner({ continuationSecret: 'bench-secret-0123456789abcdef0123456789abcdef' });

const hostFunctions = {
  host: {
    echo: (x) => x,
    approve: (x) => {
      const c = getHostFunctionContext();
      if (c.resume === undefined) c.interrupt({ approve: x });
      return c.resume.resolution;
    },
  },
};

async function must(input, want) {
  const res = await runner.run(input);
  if (res.status !== 'completed' || res.value !== want) throw new Error('unexpected result ' + JSON.stringify(res));
}

async function interruptResume() {
  const source = 'const a = await host.echo(1); const ok = await host.approve(a); return ok';
  const first = await runner.run({ source, hostFunctions });
  if (first.status !== 'interrupted') throw new Error('expected interrupt, got ' + JSON.stringify(first));
  await must({
    source,
    hostFunctions,
    continuation: first.continuation,
    resolutions: [{ interruptionId: first.interruptions[0].id, value: true }],
  }, true);
}

// The modules case: ten modules, mI importing m(I-1) (main.go has the same).
const benchModules = {};
for (let i = 0; i < 10; i++) {
  benchModules[`m${i}.js`] = i > 0
    ? `import {sum as prev} from './m${i - 1}.js'; export const v = ${i}; export const sum = prev + v;`
    : 'export const v = 0; export const sum = v;';
}
const moduleLoader = {
  identity: 'bench-v1',
  normalize: (specifier) => specifier.startsWith('./') ? specifier.slice(2) : specifier,
  load: (name) => benchModules[name],
};

async function modulesRun() {
  const res = await runner.run({ source: "import {sum} from './m9.js'; import {v} from './m0.js'; if (sum + v !== 45) throw new Error('bad sum');", moduleLoader });
  if (res.status !== 'completed') throw new Error('unexpected result ' + JSON.stringify(res));
}

const onlyCase = (() => { const i = args.indexOf('--only'); return i >= 0 ? args[i + 1] : undefined; })();

const cases = {
  fresh: () => must({ source: 'return 1+1', hostFunctions }, 2),
  roundtrip: () => must({ source: 'return await host.echo(1)', hostFunctions }, 1),
  ten: () => must({ source: 'let s = 0; for (let i = 0; i < 10; i++) s += await host.echo(i); return s', hostFunctions }, 45),
  interrupt_resume: interruptResume,
  modules: modulesRun,
};

const only = args.includes('--only-concurrent');
const selected = onlyCase !== undefined ? [[onlyCase, cases[onlyCase]]] : Object.entries(cases).filter(([n]) => n !== 'modules');
// The warm-up starts the pool's workers too.
for (const [name, fn] of only ? [] : selected) await timeCase(name, fn, N);

// CONCURRENT runs alive at once, each holding a 1,000-object array across a
// host call that settles only when all have reached it.
if (onlyCase === undefined) {
  let release;
  const gate = new Promise((r) => { release = r; });
  let started = 0;
  let allStarted;
  const everyone = new Promise((r) => { allStarted = r; });
  const concurrentHost = {
    host: { echo: async (x) => { if (++started === CONCURRENT) allStarted(); await gate; return x; } },
  };
  resetPeak();
  const t = process.hrtime.bigint();
  const runs = [];
  for (let j = 0; j < CONCURRENT; j++) {
    runs.push(runner.run({
      source: 'const a = new Array(1000).fill(0).map((_, i) => ({i})); return (await host.echo(' + j + ')) + a.length',
      hostFunctions: concurrentHost,
      // Starting CONCURRENT worker threads on a loaded 2-core machine takes
      // longer than the default 30 s, and the timeout includes the start.
      limits: { timeoutMs: 600_000 },
    }));
  }
  // A run that fails before its host call would leave `everyone` pending.
  await Promise.race([everyone, Promise.all(runs)]);
  release();
  const results = await Promise.all(runs);
  const wallMs = Number(process.hrtime.bigint() - t) / 1e6;
  results.forEach((r, j) => {
    if (r.status !== 'completed' || r.value !== j + 1000) throw new Error('bad concurrent result ' + JSON.stringify(r));
  });
  console.log(JSON.stringify({ case: 'concurrent', n: CONCURRENT, wall_ms: wallMs, rss_mib: peakRSS() }));
}
