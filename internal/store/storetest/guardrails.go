package storetest

import (
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// Guardrails is the conformance suite of store.Guardrails.
func Guardrails(t *testing.T, f Factory) {
	s := open(t, f(t))
	g := s.Guardrails()
	ctx := t.Context()

	t.Run("01 settings: none, put, replace, per tenant", func(t *testing.T) {
		if c, err := g.Get(ctx, scopeA); err != nil || c != "" {
			t.Fatalf("before any put: %q %v", c, err)
		}
		for _, c := range []string{`[{"name":"a","action":"flag"}]`, `[{"name":"b","action":"block"}]`} {
			if err := g.Put(ctx, scopeA, c); err != nil {
				t.Fatal(err)
			}
			if got, err := g.Get(ctx, scopeA); err != nil || got != c {
				t.Fatalf("get %q %v, want %q", got, err, c)
			}
		}
		for _, sc := range []store.Scope{scopeB, scopeC} {
			if c, err := g.Get(ctx, sc); err != nil || c != "" {
				t.Fatalf("%v sees %q %v", sc, c, err)
			}
		}
		if err := g.Put(ctx, store.Scope{}, "[]"); err == nil {
			t.Fatal("an empty scope was accepted")
		}
	})

	t.Run("02 detections by request, in order, per tenant", func(t *testing.T) {
		at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		ds := []store.Detection{
			{RequestID: "req_1", At: at, API: "responses", Action: "block", Guardrail: "b", Rule: "override.ignore_previous", Technique: "instruction_override",
				Location: "messages[0].content[0]", Start: 3, End: 35, Excerpt: "ignore all previous instructions", Detector: "pi-test"},
			{RequestID: "req_1", At: at, API: "responses", Action: "flag", Guardrail: "a", Rule: "extract.system_prompt", Technique: "prompt_extraction",
				Via: "base64", Location: "messages[2].content[0]", Start: 0, End: 60, Excerpt: "cHJpbnQ…", Detector: "pi-test"},
		}
		if err := g.Record(ctx, scopeA, ds); err != nil {
			t.Fatal(err)
		}
		got, err := g.Detections(ctx, scopeA, "req_1")
		if err != nil || len(got) != 2 {
			t.Fatalf("%+v %v", got, err)
		}
		for i := range ds {
			if got[i] != ds[i] && !(got[i].At.Equal(ds[i].At) && sameBut(got[i], ds[i])) {
				t.Fatalf("detection %d: %+v, want %+v", i, got[i], ds[i])
			}
		}
		if other, err := g.Detections(ctx, scopeB, "req_1"); err != nil || len(other) != 0 {
			t.Fatalf("another workspace reads %+v %v", other, err)
		}
	})
}

func sameBut(a, b store.Detection) bool {
	a.At, b.At = time.Time{}, time.Time{}
	return a == b
}
