package guard

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
)

type sample struct {
	Label     string `json:"label"`
	Technique string `json:"technique"`
	Source    string `json:"source"`
	Text      string `json:"text"`
}

func loadCorpus(t testing.TB) []sample {
	t.Helper()
	f, err := os.Open("testdata/corpus.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []sample
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var s sample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil || s.Text == "" || (s.Label != "attack" && s.Label != "benign") {
			t.Fatalf("corpus line %d: %v %+v", n, err, s)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Floors of the corpus measurement: set a little under what the rule set
// measures (see docs/guardrails.md), so a change that costs precision or recall fails.
const (
	minPrecision = 0.97
	minRecall    = 0.90
)

func TestGuardCorpus(t *testing.T) {
	corpus := loadCorpus(t)
	var tp, fp, fn, tn int
	for _, s := range corpus {
		ds := Scan(s.Text)
		switch {
		case s.Label == "attack" && len(ds) > 0:
			tp++
		case s.Label == "attack":
			fn++
			t.Logf("missed (%s, %s): %q", s.Technique, s.Source, s.Text)
		case len(ds) > 0:
			fp++
			t.Logf("false positive (%s): %q", ds[0].Rule, s.Text)
		default:
			tn++
		}
	}
	precision := float64(tp) / float64(tp+fp)
	recall := float64(tp) / float64(tp+fn)
	t.Logf("corpus: %d attacks, %d benign; tp %d fp %d fn %d tn %d; precision %.3f recall %.3f (rules %s)",
		tp+fn, fp+tn, tp, fp, fn, tn, precision, recall, Version)
	if tp+fn < 150 || fp+tn < 150 {
		t.Errorf("the corpus should hold at least 150 attacks and 150 benign prompts")
	}
	if precision < minPrecision || recall < minRecall {
		t.Errorf("precision %.3f (floor %.2f), recall %.3f (floor %.2f)", precision, minPrecision, recall, minRecall)
	}
}
