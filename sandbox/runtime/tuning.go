package runtime

// RunscFlags are the gVisor flags Shellgate starts every runsc sandbox with
// besides --root: the platform, the network, the overlay and the systrap
// tuning. Benchmarks give the same flags to their plain runsc peer rows, so
// that the comparison is of the same sandbox.
func RunscFlags() []string {
	return append([]string{"--platform=systrap", "--network=none", "--overlay2=none"}, runscTuning...)
}
