// Command guard-bench runs Shellgate's prompt-injection detector
// (internal/guard) and an npm detector, @andersmyrmel/vard (on Node), side
// by side on the same labelled corpus and the same 10 KB prompt, and
// prints precision, recall and time.
//
//	(cd bench/guard && npm ci) && go run ./bench/guard
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/shellgate/shellgate/internal/guard"
	"github.com/shellgate/shellgate/internal/guard/guardtest"
)

type sample struct {
	Label string `json:"label"`
	Text  string `json:"text"`
}

type result struct {
	TP, FP, FN, TN int
	PromptP50      float64 `json:"prompt_p50_us"`
	TenKP50        float64 `json:"tenk_p50_us"`
	TenKFlagged    bool    `json:"tenk_flagged"`
}

func main() {
	corpusPath := flag.String("corpus", "internal/guard/testdata/corpus.jsonl", "labelled corpus (JSONL)")
	dir := flag.String("dir", "bench/guard", "directory of bench.mjs (with node_modules)")
	n := flag.Int("n", 500, "runs of the 10 KB prompt")
	flag.Parse()
	corpus, err := load(*corpusPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	g := runGo(corpus, *n)
	abs, _ := filepath.Abs(*corpusPath)
	out, err := exec.Command("node", filepath.Join(*dir, "bench.mjs"), abs, fmt.Sprint(*n)).Output()
	var v result
	if err == nil {
		err = json.Unmarshal(out, &v)
	}
	nodeVer, _ := exec.Command("node", "--version").Output()
	fmt.Printf("guard %s (Go %s) vs @andersmyrmel/vard 1.2.0 moderate (Node %s); corpus %s: %d prompts; %d CPUs\n\n",
		guard.Version, runtime.Version(), strings.TrimSpace(string(nodeVer)), *corpusPath, len(corpus), runtime.NumCPU())
	fmt.Println("| detector | precision | recall | tp | fp | fn | tn | p50 per corpus prompt | p50 on the 10 KB prompt | 10 KB prompt flagged |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	row("internal/guard", g)
	if err != nil {
		fmt.Fprintf(os.Stderr, "node side failed: %v\n", err)
		os.Exit(1)
	}
	row("vard (npm)", v)
	if v.TenKP50 > 0 {
		fmt.Printf("\n10 KB prompt, time ratio guard/vard: %.2f\n", g.TenKP50/v.TenKP50)
	}
}

func row(name string, r result) {
	fmt.Printf("| %s | %.3f | %.3f | %d | %d | %d | %d | %.1f µs | %.1f µs | %v |\n", name,
		float64(r.TP)/float64(r.TP+r.FP), float64(r.TP)/float64(r.TP+r.FN), r.TP, r.FP, r.FN, r.TN, r.PromptP50, r.TenKP50, r.TenKFlagged)
}

func load(path string) ([]sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []sample
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s sample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func micros(f func()) float64 {
	t := time.Now()
	f()
	return float64(time.Since(t).Nanoseconds()) / 1000
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

func runGo(corpus []sample, n int) result {
	var r result
	flagged := func(s string) bool { return len(guard.Scan(s)) > 0 }
	for _, s := range corpus {
		hit := flagged(s.Text)
		switch {
		case s.Label == "attack" && hit:
			r.TP++
		case s.Label == "attack":
			r.FN++
		case hit:
			r.FP++
		default:
			r.TN++
		}
	}
	var per []float64
	for round := 0; round < 5; round++ {
		for _, s := range corpus {
			per = append(per, micros(func() { flagged(s.Text) }))
		}
	}
	r.PromptP50 = median(per)
	p := guardtest.Prompt10K() // the prompt of internal/guard's BenchmarkGuard10K
	for i := 0; i < 50; i++ {
		flagged(p)
	}
	var tenK []float64
	for i := 0; i < n; i++ {
		tenK = append(tenK, micros(func() { r.TenKFlagged = flagged(p) }))
	}
	r.TenKP50 = median(tenK)
	return r
}
