// Package parity holds jsrun's parity suite: the guest programs of
// cases.json run through jsrun and through the Run SDK (the npm package
// `run`, pinned in package.json / package-lock.json, driven by driver.mjs),
// and parity_test.go compares the results field by field. Install the
// reference with `npm ci` in this directory (`make parity-node`).
package parity
