package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// Logs is the conformance suite of store.Logs.
func Logs(t *testing.T, f Factory) {
	o := f(t)
	s := open(t, o)
	l := s.Logs()
	ctx := t.Context()

	t.Run("01 settings: defaults, validated, per tenant", func(t *testing.T) {
		if got, err := l.Settings(ctx, scopeA); err != nil || got != store.DefaultLogSettings || got.Enabled {
			t.Fatalf("before any put: %+v %v", got, err)
		}
		for _, bad := range []store.LogSettings{{RetentionDays: 0, MaxRecordBytes: 1 << 20}, {RetentionDays: 3651, MaxRecordBytes: 1 << 20},
			{RetentionDays: 1, MaxRecordBytes: 100}, {RetentionDays: 1, MaxRecordBytes: 32 << 20}} {
			wantErr(t, l.PutSettings(ctx, scopeA, bad), store.ErrInvalid, fmt.Sprintf("put %+v", bad))
		}
		on := store.LogSettings{Enabled: true, RetentionDays: 7, MaxRecordBytes: 8192}
		if err := l.PutSettings(ctx, scopeA, on); err != nil {
			t.Fatal(err)
		}
		if got, err := l.Settings(ctx, scopeA); err != nil || got != on {
			t.Fatalf("got %+v %v, want %+v", got, err, on)
		}
		for _, sc := range []store.Scope{scopeB, scopeC} {
			if got, err := l.Settings(ctx, sc); err != nil || got != store.DefaultLogSettings {
				t.Fatalf("%v sees %+v %v", sc, got, err)
			}
		}
		wantErr(t, l.PutSettings(ctx, store.Scope{}, on), store.ErrInvalid, "empty scope")
	})

	base := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var ids []string
	t.Run("02 record and get: round trip, detections counted, tenancy", func(t *testing.T) {
		for i := range 5 {
			r := store.RequestLog{Scope: scopeA, RequestID: fmt.Sprintf("req_%d", i), CreatedAt: base.Add(time.Duration(i) * time.Minute),
				API: []string{"responses", "messages"}[i%2], Model: "p/m", Status: "completed", HTTPStatus: 200, DurationMillis: int64(10 + i),
				ContainerID: "cntr_x", InputTokens: 3, OutputTokens: 4, CostMicroUSD: 5, ToolCalls: 1, UserAgent: "ua",
				Body: fmt.Sprintf(`{"output":"answer %d"}`, i), Truncated: i == 4}
			got, err := l.Record(ctx, r)
			if err != nil || len(got.ID) != 36 || got.ID[:4] != "log_" {
				t.Fatalf("record: %+v %v", got, err)
			}
			ids = append(ids, got.ID)
		}
		if err := s.Guardrails().Record(ctx, scopeA, []store.Detection{{RequestID: "req_3", API: "messages", Action: "flag", Rule: "r", Technique: "t"},
			{RequestID: "req_3", API: "messages", Action: "flag", Rule: "r2", Technique: "t"}}); err != nil {
			t.Fatal(err)
		}
		// The same request id in another scope is not counted.
		if err := s.Guardrails().Record(ctx, scopeB, []store.Detection{{RequestID: "req_1", Action: "flag"}}); err != nil {
			t.Fatal(err)
		}
		got, err := l.Get(ctx, scopeA, ids[3])
		if err != nil {
			t.Fatal(err)
		}
		want := store.RequestLog{ID: ids[3], Scope: scopeA, RequestID: "req_3", CreatedAt: base.Add(3 * time.Minute), API: "messages", Model: "p/m",
			Status: "completed", HTTPStatus: 200, DurationMillis: 13, ContainerID: "cntr_x", InputTokens: 3, OutputTokens: 4, CostMicroUSD: 5,
			ToolCalls: 1, UserAgent: "ua", Body: `{"output":"answer 3"}`, Detections: 2}
		if got != want {
			t.Fatalf("got %+v\nwant %+v", got, want)
		}
		if g, err := l.Get(ctx, scopeA, ids[4]); err != nil || !g.Truncated || g.Detections != 0 {
			t.Fatalf("%+v %v", g, err)
		}
		// Recording an id twice keeps the first.
		dup := want
		dup.Body = "changed"
		if _, err := l.Record(ctx, dup); err != nil {
			t.Fatal(err)
		}
		if g, _ := l.Get(ctx, scopeA, ids[3]); g.Body != want.Body {
			t.Fatalf("a second record replaced the first: %q", g.Body)
		}
		_, foreign := l.Get(ctx, scopeB, ids[0])
		_, missing := l.Get(ctx, scopeA, "log_00000000000000000000000000000000")
		sameAsMissing(t, foreign, ids[0], missing, "log_00000000000000000000000000000000", "get")
		if p, err := l.List(ctx, scopeC, store.LogFilter{Limit: 10}); err != nil || len(p.Items) != 0 {
			t.Fatalf("another account lists %+v %v", p, err)
		}
	})

	t.Run("03 list: newest first, filters, pagination", func(t *testing.T) {
		list := func(f store.LogFilter) []string {
			t.Helper()
			p, err := l.List(ctx, scopeA, f)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, it := range p.Items {
				if it.Body != "" {
					t.Fatalf("a listing carries the body %q", it.Body)
				}
				out = append(out, it.ID)
			}
			return out
		}
		eq := func(got []string, want ...string) {
			t.Helper()
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		}
		eq(list(store.LogFilter{Limit: 10}), ids[4], ids[3], ids[2], ids[1], ids[0])
		eq(list(store.LogFilter{Limit: 10, API: "messages"}), ids[3], ids[1])
		eq(list(store.LogFilter{Limit: 10, Model: "p/other"}))
		eq(list(store.LogFilter{Limit: 10, ContainerID: "cntr_x", Status: "completed"}), ids[4], ids[3], ids[2], ids[1], ids[0])
		eq(list(store.LogFilter{Limit: 10, Since: base.Add(time.Minute), Until: base.Add(3 * time.Minute)}), ids[2], ids[1])
		yes, no := true, false
		eq(list(store.LogFilter{Limit: 10, HasDetections: &yes}), ids[3])
		eq(list(store.LogFilter{Limit: 10, HasDetections: &no}), ids[4], ids[2], ids[1], ids[0])
		// Pages of two.
		var all []string
		after := ""
		for range 4 {
			p, err := l.List(ctx, scopeA, store.LogFilter{Limit: 2, After: after})
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range p.Items {
				all = append(all, it.ID)
			}
			if !p.HasMore {
				break
			}
			after = p.Items[len(p.Items)-1].ID
		}
		eq(all, ids[4], ids[3], ids[2], ids[1], ids[0])
		_, err := l.List(ctx, scopeB, store.LogFilter{Limit: 2, After: ids[0]})
		wantErr(t, err, store.ErrNotFound, "another scope's cursor")
		for _, n := range []int{0, store.MaxPageSize + 1} {
			_, err := l.List(ctx, scopeA, store.LogFilter{Limit: n})
			wantErr(t, err, store.ErrInvalid, fmt.Sprintf("limit %d", n))
		}
	})

	t.Run("04 sweep: each scope's retention, in batches, survives reopen", func(t *testing.T) {
		// Scope A keeps 7 days; scope B the default 30.
		now := base.Add(10 * 24 * time.Hour)
		b, err := l.Record(ctx, store.RequestLog{Scope: scopeB, RequestID: "req_b", CreatedAt: base, API: "responses", Status: "completed"})
		if err != nil {
			t.Fatal(err)
		}
		s2 := reopen(t, s, o)
		l2 := s2.Logs()
		total := 0
		for {
			n, err := l2.Sweep(ctx, now, 2)
			if err != nil {
				t.Fatal(err)
			}
			total += n
			if n < 2 {
				break
			}
		}
		if total != 5 {
			t.Fatalf("swept %d, want scope A's 5", total)
		}
		if _, err := l2.Get(ctx, scopeB, b.ID); err != nil {
			t.Fatalf("scope B's record, within its 30 days, was swept: %v", err)
		}
		if _, err := l2.Get(ctx, scopeA, ids[0]); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("scope A's old record: %v", err)
		}
		if n, err := l2.Sweep(ctx, base.Add(31*24*time.Hour), 100); err != nil || n != 1 {
			t.Fatalf("after 31 days: %d %v", n, err)
		}
	})
}
