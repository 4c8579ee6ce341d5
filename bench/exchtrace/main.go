// Command exchtrace splits BenchmarkGatewayStep's upstream exchanges into
// phases, from a runtime trace, to compare the gateway's exchanges with
// their direct replays (the eleventh round of "Overhead per tool step" in
// BENCHMARKS.md as of aa5f522; the file now keeps the newest round only). The benchmark marks each exchange's start with a trace log
// (category "exchange", message "gateway" or "direct", in the HTTP
// client's RoundTrip) and the scripted model marks its handler's start
// (category "scripted"); an exchange here is the interval between the two,
// the part of the exchange that differs between the sides.
//
//	cd internal/server
//	go test -c -o /tmp/gw.test . && /tmp/gw.test -test.run XXX \
//	    -test.bench 'BenchmarkGatewayStep/responses' -test.benchtime 10x -test.trace /tmp/gw.trace
//	cd ../../bench/exchtrace && go run . /tmp/gw.trace
//
// It is a module of its own so that the trace parser (golang.org/x/exp)
// stays out of Shellgate's dependencies.
package main

import (
	"fmt"
	"io"
	"iter"
	"os"
	"slices"

	"golang.org/x/exp/trace"
)

// exchange is one exchange's events, from the client's RoundTrip to the
// scripted model's handler.
type exchange struct {
	side    string
	client  trace.GoID // the goroutine that called RoundTrip
	handler trace.GoID // the scripted model's handler goroutine
	t0, t1  trace.Time
	gc      bool // a GC mark phase was running at some point
	evs     []trace.Event
}

// phases are the parts of an exchange, in order, and the whole (over
// every exchange; the parts over those whose parts follow each other).
var phases = []string{
	"client: RoundTrip until it waits on the connection",
	"writer: woken until its first write(2)",
	"writer: first write(2) until the last returns",
	"server: last write(2) until its read(2) returns",
	"server: read returned until the handler starts",
	"whole: RoundTrip until the handler starts",
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: exchtrace TRACE")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fail(err)
	}
	defer f.Close()
	xs, err := read(f)
	if err != nil {
		fail(err)
	}
	bySide := map[string][][]float64{}
	other := map[string][]float64{}
	gcs := map[string]int{}
	overlapped := map[string]int{}
	for _, x := range xs {
		if x.gc {
			gcs[x.side]++
		}
		if bySide[x.side] == nil {
			bySide[x.side] = make([][]float64, len(phases))
		}
		ph, ok := x.phases()
		last := len(phases) - 1
		bySide[x.side][last] = append(bySide[x.side][last], ph[len(ph)-1])
		if !ok {
			overlapped[x.side]++
			continue
		}
		for i, d := range ph[:last] {
			bySide[x.side][i] = append(bySide[x.side][i], d)
		}
		other[x.side] = append(other[x.side], float64(x.others()))
	}
	sides := []string{"gateway", "direct"}
	fmt.Printf("%-50s", "µs (median / mean)")
	for _, s := range sides {
		fmt.Printf(" %18s", s)
	}
	fmt.Printf(" %14s\n", "gateway−direct")
	for i, name := range phases {
		fmt.Printf("%-50s", name)
		var meds []float64
		for _, s := range sides {
			v := bySide[s]
			if v == nil {
				fmt.Printf(" %18s", "-")
				continue
			}
			m := median(v[i])
			meds = append(meds, m)
			fmt.Printf(" %8.1f / %7.1f", m, mean(v[i]))
		}
		if len(meds) == 2 {
			fmt.Printf(" %14.1f", meds[0]-meds[1])
		}
		fmt.Println()
	}
	for _, s := range sides {
		if bySide[s] == nil {
			fmt.Printf("%s: no exchanges in the trace\n", s)
			continue
		}
		fmt.Printf("%s: %d exchanges, %d of them split into phases (the others overlapped the server's read with the writer's write(2)), %d met a GC mark phase, %.2f goroutines besides the client and the handler ran in each\n",
			s, len(bySide[s][len(phases)-1]), len(other[s]), gcs[s], mean(other[s]))
	}
}

// read collects the exchanges of a trace.
func read(r io.Reader) ([]*exchange, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	var xs []*exchange
	var cur *exchange
	gc := false
	for {
		ev, err := tr.ReadEvent()
		if err == io.EOF {
			return xs, nil
		}
		if err != nil {
			return nil, err
		}
		switch ev.Kind() {
		case trace.EventRangeBegin, trace.EventRangeEnd:
			if ev.Range().Name == "GC concurrent mark phase" {
				gc = ev.Kind() == trace.EventRangeBegin
				if cur != nil && gc {
					cur.gc = true
				}
			}
		case trace.EventLog:
			switch l := ev.Log(); {
			case l.Category == "exchange":
				cur = &exchange{side: l.Message, client: ev.Goroutine(), t0: ev.Time(), gc: gc}
				continue
			case l.Category == "scripted" && cur != nil:
				cur.t1, cur.handler = ev.Time(), ev.Goroutine()
				xs = append(xs, cur)
				cur = nil
				continue
			}
		}
		if cur != nil {
			cur.evs = append(cur.evs, ev)
		}
	}
}

// goTransitions yields x's goroutine state transitions, each with its
// event.
func (x *exchange) goTransitions() iter.Seq2[trace.Event, trace.StateTransition] {
	return func(yield func(trace.Event, trace.StateTransition) bool) {
		for _, ev := range x.evs {
			if ev.Kind() != trace.EventStateTransition {
				continue
			}
			if st := ev.StateTransition(); st.Resource.Kind == trace.ResourceGoroutine && !yield(ev, st) {
				return
			}
		}
	}
}

// phases measures x's phases in µs, the whole last; only the whole, and
// false, when the phases are not in sequence: the server's read returned
// before the writer's last write(2) did (its other CPU took the first
// bytes of a large request while the rest was being written), or an end
// is not in the trace.
func (x *exchange) phases() ([]float64, bool) {
	var clientWaits, writerRuns, writeStart, writeEnd, readEnd trace.Time
	writer := trace.NoGoroutine
	for ev, st := range x.goTransitions() {
		g := st.Resource.Goroutine()
		from, to := st.Goroutine()
		switch {
		case g == x.client && to == trace.GoWaiting && clientWaits == 0:
			clientWaits = ev.Time()
		case writer == trace.NoGoroutine && ev.Goroutine() == x.client && from == trace.GoWaiting && to == trace.GoRunnable:
			writer = g // the connection's writeLoop, woken by RoundTrip
		case g == writer && to == trace.GoRunning && writerRuns == 0:
			writerRuns = ev.Time()
		case g == writer && to == trace.GoSyscall && writeStart == 0:
			writeStart = ev.Time()
		case g == writer && from == trace.GoSyscall:
			writeEnd = ev.Time()
		case g == x.handler && from == trace.GoSyscall:
			readEnd = ev.Time()
		}
	}
	us := func(a, b trace.Time) float64 { return float64(b-a) / 1e3 }
	whole := us(x.t0, x.t1)
	if clientWaits == 0 || writerRuns == 0 || writeStart == 0 || writeEnd == 0 || readEnd == 0 || readEnd < writeEnd {
		return []float64{whole}, false
	}
	return []float64{us(x.t0, clientWaits), us(writerRuns, writeStart), us(writeStart, writeEnd),
		us(writeEnd, readEnd), us(readEnd, x.t1), whole}, true
}

// others counts the goroutines other than the client and the handler that
// ran during x.
func (x *exchange) others() int {
	seen := map[trace.GoID]bool{}
	for _, st := range x.goTransitions() {
		if _, to := st.Goroutine(); to == trace.GoRunning {
			if g := st.Resource.Goroutine(); g != x.client && g != x.handler {
				seen[g] = true
			}
		}
	}
	return len(seen)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var t float64
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "exchtrace:", err)
	os.Exit(1)
}
