//go:build !race

package jsrun

const raceEnabled = false
