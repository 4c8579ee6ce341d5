package gateway

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/jsonw/jsonwtest"
	"github.com/shellgate/shellgate/internal/tool"
)

// shellResultJSON is ShellResultText as it was written with encoding/json:
// the reference the hand-written encoder must match byte for byte.
func shellResultJSON(containerID string, outs []tool.CommandOutput, changed []ChangedFile) string {
	type file struct {
		Path  string `json:"path"`
		Bytes int64  `json:"bytes"`
	}
	v := struct {
		ContainerID string               `json:"container_id,omitempty"`
		Output      []tool.CommandOutput `json:"output"`
		Files       []file               `json:"files_changed,omitempty"`
	}{ContainerID: containerID, Output: outs}
	if v.Output == nil {
		v.Output = []tool.CommandOutput{}
	}
	for _, f := range changed {
		v.Files = append(v.Files, file{Path: "/workspace/home/" + strings.TrimPrefix(f.Path, "/"), Bytes: f.Bytes})
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestShellResultTextIsEncodingJSON(t *testing.T) {
	ss := jsonwtest.Strings()
	codes := []*int{nil, ptr(0), ptr(1), ptr(-1), ptr(137), ptr(255), ptr(math.MaxInt), ptr(math.MinInt)}
	sizes := []int64{0, 1, -1, 1 << 40, math.MaxInt64, math.MinInt64}
	check := func(what string, id string, outs []tool.CommandOutput, changed []ChangedFile) {
		t.Helper()
		if got, want := ShellResultText(id, outs, changed), shellResultJSON(id, outs, changed); got != want {
			t.Fatalf("%s:\n got %q\nwant %q", what, got, want)
		}
	}
	// Empty and absent parts, and every field that only json tags hide.
	for _, outs := range [][]tool.CommandOutput{nil, {}, {{}}, {{Truncated: true, Start: time.Now(), End: time.Now()}}} {
		for _, changed := range [][]ChangedFile{nil, {}, {{}}, {{ID: "cfile_x", Path: "/", ModTime: time.Now()}}} {
			for _, id := range []string{"", "cntr_0123"} {
				check(fmt.Sprintf("outs %v changed %v id %q", outs, changed, id), id, outs, changed)
			}
		}
	}
	// Every hostile text in every field, with every kind of exit code,
	// one to four commands and changed files.
	for i, s := range ss {
		next := func(k int) string { return ss[(i*7+k)%len(ss)] }
		var outs []tool.CommandOutput
		for k := range i%4 + 1 {
			outs = append(outs, tool.CommandOutput{
				Stdout: next(k), Stderr: next(k + 1),
				Outcome:   tool.Outcome{Type: []string{"exit", "timeout", s}[(i+k)%3], ExitCode: codes[(i+k)%len(codes)]},
				Truncated: k%2 == 0,
			})
		}
		outs[0].Stdout = s
		var changed []ChangedFile
		for k := range i % 3 {
			p := next(k + 5)
			if k == 1 {
				p = "/" + p
			}
			changed = append(changed, ChangedFile{ID: next(k), Path: p, Bytes: sizes[(i+k)%len(sizes)]})
		}
		check(fmt.Sprintf("case %d", i), []string{"", "cntr_1", s}[i%3], outs, changed)
	}
}

func ptr(v int) *int { return &v }

// BenchmarkShellResultText: one step's result text, a typical one (two
// commands, short output, no files changed), hand-written vs json.Marshal.
func BenchmarkShellResultText(b *testing.B) {
	outs := []tool.CommandOutput{
		{Stdout: "total 8\ndrwxr-xr-x 2 user user 4096 Dec  1 12:00 out\n-rw-r--r-- 1 user user   42 Dec  1 12:00 sales.csv\n", Outcome: tool.Outcome{Type: "exit", ExitCode: ptr(0)}},
		{Stdout: "12.5\n", Stderr: "warning: <stdin> & friends\n", Outcome: tool.Outcome{Type: "exit", ExitCode: ptr(1)}},
	}
	for _, enc := range []struct {
		name string
		f    func(string, []tool.CommandOutput, []ChangedFile) string
	}{{"lean", ShellResultText}, {"json.Marshal", shellResultJSON}} {
		b.Run(enc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				enc.f("cntr_0123456789abcdef0123456789abcdef", outs, nil)
			}
		})
	}
}
