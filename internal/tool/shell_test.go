package tool

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/jsontest"
	"github.com/shellgate/shellgate/sandbox"
)

func i64(v int64) *int64 { return &v }

func TestPlan(t *testing.T) {
	many := make([]string, 101)
	for i := range many {
		many[i] = "true"
	}
	cases := []struct {
		name    string
		args    ShellArgs
		wantErr string
		timeout int64
		maxOut  int
	}{
		{name: "01 defaults", args: ShellArgs{Commands: []string{"ls"}}, timeout: 120000, maxOut: 16384},
		{name: "02 empty list", args: ShellArgs{}, wantErr: "commands is empty"},
		{name: "03 101 commands", args: ShellArgs{Commands: many}, wantErr: "101 commands in one call: at most 100"},
		{name: "04 100 commands", args: ShellArgs{Commands: many[:100]}, timeout: 120000, maxOut: 16384},
		{name: "05 blank command", args: ShellArgs{Commands: []string{"ls", "  "}}, wantErr: "command 2 is empty"},
		{name: "06 negative timeout", args: ShellArgs{Commands: []string{"ls"}, TimeoutMs: i64(-5)}, wantErr: "timeout_ms must be a positive"},
		{name: "07 zero timeout", args: ShellArgs{Commands: []string{"ls"}, TimeoutMs: i64(0)}, wantErr: "timeout_ms must be a positive"},
		{name: "08 huge timeout clamped", args: ShellArgs{Commands: []string{"ls"}, TimeoutMs: i64(1 << 60)}, timeout: 300000, maxOut: 16384},
		{name: "09 output clamped", args: ShellArgs{Commands: []string{"ls"}, MaxOutputLength: i64(1 << 40)}, timeout: 120000, maxOut: 65536},
		{name: "10 negative output", args: ShellArgs{Commands: []string{"ls"}, MaxOutputLength: i64(-1)}, wantErr: "max_output_length must be a positive"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := c.args.Plan()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.TimeoutMs != c.timeout || p.MaxOutputLength != c.maxOut {
				t.Fatalf("plan %+v", p)
			}
			if (c.timeout == MaxTimeoutMs || c.maxOut == MaxMaxOutput) && len(p.Notes) == 0 {
				t.Error("clamping must be noted")
			}
		})
	}
}

func TestParseShellArgs(t *testing.T) {
	for _, bad := range []string{`not json`, `{"commands": "ls"}`, `{"commands": ["ls"], "timeout_ms": "5"}`, `{"commands": ["ls"], "timeout_ms": 1e40}`} {
		if _, err := ParseShellArgs([]byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v", bad, err)
		}
	}
	a, err := ParseShellArgs([]byte(`{"commands":["echo hi"],"timeout_ms":5000}`))
	if err != nil || a.Commands[0] != "echo hi" || *a.TimeoutMs != 5000 {
		t.Fatalf("%+v %v", a, err)
	}
	// Text after the arguments' object is ignored, as it always was (the
	// first JSON value counts), and a partly decoded value leaves nothing.
	a, err = ParseShellArgs([]byte(`{"commands":["ls"]} {"commands":["rm -rf /"]}`))
	if err != nil || len(a.Commands) != 1 || a.Commands[0] != "ls" {
		t.Fatalf("trailing text: %+v %v", a, err)
	}
	a, err = ParseShellArgs([]byte(`{"commands":["ls"],"timeout_ms":"x"} trailing`))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("type error with trailing text: %+v %v", a, err)
	}
}

func TestOutputShaping(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		total  int64
		max    int
		want   string
		marked bool
	}{
		{"01 short", "hello\n", 6, 100, "hello\n", false},
		{"02 cut by characters", "héllo wörld", 13, 5, "héllo", true},
		{"03 cut by the agent mid-rune", "ab\xe4\xb8", 1000, 100, "ab", true},
		{"04 invalid bytes", "a\xffb", 3, 100, "a\uFFFDb", false},
		{"05 emoji counted as one", "🎉🎉🎉", 12, 2, "🎉🎉", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Output(sandbox.Result{Stdout: []byte(c.in), StdoutBytes: c.total}, c.max)
			got, marked := o.Stdout, strings.Contains(o.Stdout, TruncationMarker)
			if marked {
				got = got[:strings.Index(got, TruncationMarker)]
			}
			if got != c.want || marked != c.marked {
				t.Fatalf("got %q (marked %v), want %q (marked %v)", o.Stdout, marked, c.want, c.marked)
			}
		})
	}
	if o := Output(sandbox.Result{TimedOut: true}, 10); o.Outcome.Type != "timeout" || o.Outcome.ExitCode != nil {
		t.Errorf("timeout outcome: %+v", o.Outcome)
	}
	// The sandbox's notes come after stderr whole, whatever cut stderr: a
	// fork bomb's flood of "can't fork" must not hide the process limit.
	note := "shellgate: the command reached the sandbox's process limit\n"
	flood := strings.Repeat("sh: can't fork\n", 100)
	o := Output(sandbox.Result{Stderr: []byte(flood), StderrBytes: int64(len(flood)), Notes: []byte(note)}, 20)
	if !strings.Contains(o.Stderr, TruncationMarker) || !strings.HasSuffix(o.Stderr, "]\n"+note) {
		t.Errorf("a capped stderr lost or mangled the notes: %q", o.Stderr)
	}
	if o := Output(sandbox.Result{Notes: []byte(note)}, 20); o.Stderr != note {
		t.Errorf("notes alone: %q", o.Stderr)
	}
}

// TestParseShellArgsMatchesDecoder: the one-pass decoder of the common
// case gives what encoding/json's Decoder (the path every error takes)
// gives, on arguments a model or an attacker may send.
func TestParseShellArgsMatchesDecoder(t *testing.T) {
	corpus := []string{
		`{"commands":["ls"]}`, `{"commands":[]}`, `{"commands":null}`, `{}`, `null`, `[]`, `"x"`, `1`, ``, ` `,
		`{"commands":["a","b"],"timeout_ms":1,"max_output_length":2}`, `{"Commands":["case"]}`, `{"COMMANDS":["case"],"Timeout_MS":5}`,
		`{"commands":["a"],"commands":["b"]}`, `{"commands":["\ud800"]}`, "{\"commands\":[\"\xff\xfe\"]}", `{"commands":["\u0000"]}`,
		`{"commands":["ls"],"timeout_ms":1.0}`, `{"commands":["ls"],"timeout_ms":1e3}`, `{"commands":["ls"],"timeout_ms":-0}`,
		`{"commands":["ls"],"timeout_ms":9223372036854775808}`, `{"commands":["ls"],"timeout_ms":null}`, `{"commands":["ls"],"extra":{"a":[1,2,{}]}}`,
		`{"commands":[1]}`, `{"commands":["ls",null]}`, `{"commands":{"0":"ls"}}`, `{"commands":["ls"]`, `{"commands":["ls"]}}`,
		`{"commands":["ls"]} trailing`, `  {"commands":["ls"]}  `, `{"commands":["ls"],}`, `{'commands':['ls']}`, `{"commands":["a\"b\\c\/d\n"]}`,
		`{"max_output_length":"1","commands":["ls"]}`, `{"commands":["ls"],"timeout_ms":true}`, strings.Repeat(`[`, 10001) + strings.Repeat(`]`, 10001),
	}
	for _, s := range jsontest.Strings() {
		b, _ := json.Marshal(s)
		corpus = append(corpus, `{"commands":[`+string(b)+`,"ls"],"timeout_ms":7,"max_output_length":null,"other":`+string(b)+`}`)
	}
	for _, in := range corpus {
		got, gerr := ParseShellArgs([]byte(in))
		var want ShellArgs
		werr := json.NewDecoder(strings.NewReader(in)).Decode(&want)
		if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(got, want) && gerr == nil {
			t.Errorf("%.60q: got %+v, %v; encoding/json: %+v, %v", in, got, gerr, want, werr)
		}
	}
}
