// The npm side of bench/guard: @andersmyrmel/vard (its default preset,
// moderate, with maxLength raised so that every corpus line and the 10 KB
// prompt are judged) on the corpus given as argv[2]; prints one JSON object.
import { readFileSync } from "node:fs";
import vard from "@andersmyrmel/vard";

const corpus = readFileSync(process.argv[2], "utf8").trim().split("\n").map((l) => JSON.parse(l));
const n = Number(process.argv[3] || 200);
const detect = vard.moderate().maxLength(1 << 20);
const flagged = (text) => !detect.safeParse(text).safe;

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
const micros = (f) => { const t = process.hrtime.bigint(); f(); return Number(process.hrtime.bigint() - t) / 1000; };

let tp = 0, fp = 0, fn = 0, tn = 0;
for (const s of corpus) {
  const hit = flagged(s.text);
  if (s.label === "attack") hit ? tp++ : fn++;
  else hit ? fp++ : tn++;
}
// Per prompt: every corpus line, 5 rounds (after one warm-up round).
corpus.forEach((s) => flagged(s.text));
const perPrompt = [];
for (let r = 0; r < 5; r++) for (const s of corpus) perPrompt.push(micros(() => flagged(s.text)));

// The same 10 KB prompt as BenchmarkGuard10K.
const para = "Please look at the attached sales data and tell me which region grew fastest last quarter. " +
  "Ignore the first row of the CSV, it is a header, and treat empty cells as zero. Act as a careful analyst.\n" +
  "region,q1,q2,q3,q4\nnorth,120,130,150,170\nsouth,90,95,99,101\neast,200,180,220,260\n";
let p = "";
while (p.length < 10240) p += para;
p = p.slice(0, 10240);
for (let i = 0; i < 50; i++) flagged(p);
const tenK = [];
for (let i = 0; i < n; i++) tenK.push(micros(() => flagged(p)));

console.log(JSON.stringify({ tp, fp, fn, tn, prompt_p50_us: median(perPrompt), tenk_p50_us: median(tenK), tenk_flagged: flagged(p) }));
