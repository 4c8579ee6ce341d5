package jsrun

import (
	"context"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// operatorLimits are a runner's configured limits, all below the package
// defaults. The timeout is checked on a runner of its own (quickRunner), so
// that a slow machine cannot turn another case into a timeout.
var operatorLimits = Limits{
	Timeout:            20 * time.Second,
	MemoryBytes:        8 << 20,
	StackBytes:         256 << 10,
	ResultBytes:        1000,
	SourceBytes:        1000,
	HostArgumentsBytes: 1000,
	HostOutputBytes:    1000,
	HostCalls:          3,
	InFlightHostCalls:  2,
	ConsoleBytes:       100,
	ContinuationBytes:  4000,
}

// TestRequestCannotRaiseLimits is issue 6 item 15: a run's Limits were
// capped at the package defaults, not at the runner's, so a request lifted a
// 200 ms runner timeout to 30 s. Every limit is asked for at its package
// default (far above the operator's) and must stay at the operator's.
func TestRequestCannotRaiseLimits(t *testing.T) {
	r := newTestRunner(t, func(c *Config) { c.Limits = operatorLimits })
	quick := newTestRunner(t, func(c *Config) { c.Limits = Limits{Timeout: 200 * time.Millisecond} })
	var calls atomic.Int64
	hf := tools(&calls)
	raise := DefaultLimits
	cases := []struct {
		name, src string
		code      Code
		message   string // part of the error message naming the operator's limit
	}{
		{"time", `while (true) {}`, CodeTimeout, "200ms"},
		{"memory", `const a = []; for (let i = 0; i < 24; i++) a.push('x'.repeat(1 << 20) + i); return a.length`, CodeMemoryLimit, ""},
		{"stack", `function deep(n) { return n === 0 ? 0 : 1 + deep(n - 1) } return deep(5000)`, CodeStackOverflow, ""},
		{"result", `return 'x'.repeat(2000)`, CodeResultTooLarge, "limit of 1000"},
		{"source", `return 1 // ` + strings.Repeat("x", 1000), CodeSourceTooLarge, "limit of 1000"},
		{"host arguments", `return await tools.echo('x'.repeat(2000))`, CodeBridgeLimit, "the 1000 byte size limit"},
		// Go's JSON escapes '<' as \u003c: 400 bytes of arguments come back
		// as about 2,400 bytes of result.
		{"host output", `return (await tools.echo('<'.repeat(400))).length`, CodeBridgeLimit, "the 1000 byte size limit"},
		{"host calls", `let s = 0; for (let i = 0; i < 4; i++) s += await tools.sum(i); return s`, CodeBridgeLimit, "more than 3 host calls"},
		{"in flight", `return await Promise.all([tools.sleep(1, 1), tools.sleep(1, 2), tools.sleep(1, 3)])`, CodeBridgeLimit, "more than 2 host calls in flight"},
		{"continuation", `for (let i = 0; i < 2; i++) await tools.echo('z'.repeat(900)); return await tools.approve(1)`, CodeContinuationTooLarge, "limit of 4000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A bound on the test itself: with the bug the timeout case
			// would take the package default's 30 s; the message tells
			// which limit applied.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			runner := r
			if c.code == CodeTimeout {
				runner = quick
			}
			_, err := runner.Run(ctx, Input{Source: c.src, HostFunctions: hf, Limits: raise})
			e := wantCode(t, err, c.code)
			if !strings.Contains(e.Message, c.message) {
				t.Fatalf("message %q does not name the operator's limit (%q)", e.Message, c.message)
			}
		})
	}
	t.Run("console", func(t *testing.T) {
		res := mustRun(t, r, Input{Source: `console.log('x'.repeat(500)); return 1`, Limits: raise})
		if !res.ConsoleTruncated || len(res.Console) > operatorLimits.ConsoleBytes {
			t.Fatalf("console of %d bytes (truncated %v), operator limit %d", len(res.Console), res.ConsoleTruncated, operatorLimits.ConsoleBytes)
		}
	})
}

// TestRequestCanLowerLimits: lowering still works, per field.
func TestRequestCanLowerLimits(t *testing.T) {
	r := newTestRunner(t, func(c *Config) { c.Limits = operatorLimits })
	var calls atomic.Int64
	hf := tools(&calls)
	_, err := r.Run(context.Background(), Input{Source: `while (true) {}`, Limits: Limits{Timeout: 50 * time.Millisecond}})
	if e := wantCode(t, err, CodeTimeout); !strings.Contains(e.Message, "50ms") {
		t.Fatalf("message %q", e.Message)
	}
	_, err = r.Run(context.Background(), Input{Source: `return 'x'.repeat(200)`, Limits: Limits{ResultBytes: 100}})
	wantCode(t, err, CodeResultTooLarge)
	_, err = r.Run(context.Background(), Input{Source: `await tools.sum(1); return await tools.sum(2)`, HostFunctions: hf, Limits: Limits{HostCalls: 1}})
	wantCode(t, err, CodeBridgeLimit)
	res := mustRun(t, r, Input{Source: `console.log('x'.repeat(500)); return 1`, Limits: Limits{ConsoleBytes: 10}})
	if !res.ConsoleTruncated || len(res.Console) > 10 {
		t.Fatalf("console %q", res.Console)
	}
	// Zero fields keep the operator's limit.
	if got := (Limits{ResultBytes: 10}).lower(operatorLimits); got.Timeout != operatorLimits.Timeout || got.ResultBytes != 10 || got.HostCalls != 3 {
		t.Fatalf("lower: %+v", got)
	}
}

// TestLimitsIntsNamesEveryField: merge, lower and validate see only the
// fields ints lists, so a field added to Limits must be listed there.
func TestLimitsIntsNamesEveryField(t *testing.T) {
	var l Limits
	listed := map[string]bool{}
	for _, f := range l.ints() {
		listed[f.name] = true
		if field, ok := reflect.TypeOf(l).FieldByName(f.name); !ok || reflect.ValueOf(&l).Elem().FieldByIndex(field.Index).Addr().Interface() != f.p {
			t.Errorf("ints names %s with another field's address", f.name)
		}
	}
	for _, f := range reflect.VisibleFields(reflect.TypeOf(l)) {
		if f.Type.Kind() == reflect.Int && !listed[f.Name] {
			t.Errorf("Limits.%s is not in ints", f.Name)
		}
	}
	if n := reflect.TypeOf(l).NumField(); n != len(listed)+1 { // and Timeout
		t.Errorf("Limits has %d fields, ints lists %d besides Timeout", n, len(listed))
	}
}
