// The case runner the client scripts share: each check prints one JSON
// line {case, ok, detail} for test/e2e's runNode; exit with failed().
let failures = 0;

export async function check(name, fn) {
  try {
    const detail = await fn();
    console.log(JSON.stringify({ case: name, ok: true, detail }));
  } catch (err) {
    failures++;
    console.log(JSON.stringify({ case: name, ok: false, detail: String(err && err.stack || err) }));
  }
}

export function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

// failed is the number of checks that failed: the script's exit code.
export function failed() {
  return failures;
}
