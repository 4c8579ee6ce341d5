// Package guardtest holds the input the prompt-injection detector's
// benchmarks share: internal/guard's BenchmarkGuard10K and bench/guard's
// side-by-side run time the detector on the same prompt.
package guardtest

import "strings"

// Prompt10K is a 10 KB user prompt of ordinary prose and a CSV, the
// common case: no attack in it.
func Prompt10K() string {
	var b strings.Builder
	para := "Please look at the attached sales data and tell me which region grew fastest last quarter. " +
		"Ignore the first row of the CSV, it is a header, and treat empty cells as zero. Act as a careful analyst.\n" +
		"region,q1,q2,q3,q4\nnorth,120,130,150,170\nsouth,90,95,99,101\neast,200,180,220,260\n"
	for b.Len() < 10<<10 {
		b.WriteString(para)
	}
	return b.String()[:10<<10]
}
