//go:build race

package jsrun

// raceEnabled scales loop-heavy tests down: the race detector slows the
// engine (pure Go QuickJS) by about 20x.
const raceEnabled = true
