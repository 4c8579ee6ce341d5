// What bench.mjs and run.mjs share: their command-line numbers, the timing
// of a case, and the process's peak RSS.
import fs from 'node:fs';

export const args = process.argv.slice(2);

// opt is the number after --name on the command line, or def.
export function opt(name, def) {
  const i = args.indexOf('--' + name);
  return i >= 0 ? Number(args[i + 1]) : def;
}

function pct(d, p) { return d[Math.min(d.length - 1, Math.floor(d.length * p))]; }

// timeCase warms fn up with 20 runs, then times n runs and prints the case's
// p50 and p99 in µs as one JSON line.
export async function timeCase(name, fn, n) {
  for (let i = 0; i < 20; i++) await fn();
  const d = [];
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint();
    await fn();
    d.push(Number(process.hrtime.bigint() - t) / 1000);
  }
  d.sort((a, b) => a - b);
  console.log(JSON.stringify({ case: name, n, p50_us: pct(d, 0.5), p99_us: pct(d, 0.99) }));
}

// peakRSS is the process's high-water RSS in MiB (VmHWM: main thread and
// every worker thread); resetPeak starts a new high-water mark.
export function peakRSS() {
  const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) / 1024 : process.memoryUsage().rss / (1 << 20);
}
export function resetPeak() {
  try { fs.writeFileSync('/proc/self/clear_refs', '5'); } catch { /* peak then includes earlier cases */ }
}
