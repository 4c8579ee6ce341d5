package jsonw_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/shellgate/shellgate/internal/jsonw"
	"github.com/shellgate/shellgate/internal/jsonw/jsonwtest"
)

// anyDocs decode into the values AppendAny writes.
var anyDocs = []string{
	`null`, `true`, `false`, `0`, `-0`, `1`, `-1.5`, `1e20`, `1e21`, `123456789012345678901234`, `1e-6`, `1e-7`, `9.999e-7`,
	`5e-324`, `1.7976931348623157e308`, `0.1`, `100`, `1E+2`, `12345678901234567890`, `""`, `"<&>\u2028"`, `[]`, `{}`,
	`{"b":1,"a":[1,"x",null,{"d":{},"c":[]}],"":true,"A":false,"é":"中","\u00e9x":0.5}`,
}

func checkAny(t *testing.T, v any) {
	t.Helper()
	want, err := json.Marshal(v)
	got, ok := jsonw.AppendAny([]byte("prefix"), v)
	if (err == nil) != ok {
		t.Fatalf("AppendAny(%#v): ok %v, json.Marshal: %v", v, ok, err)
	}
	if ok && (string(got[:6]) != "prefix" || string(got[6:]) != string(want)) {
		t.Fatalf("AppendAny(%#v) = %s, want %s", v, got[6:], want)
	}
}

func TestAppendAnyIsMarshal(t *testing.T) {
	docs := anyDocs
	for _, s := range jsonwtest.Strings() {
		q, _ := json.Marshal(s)
		docs = append(docs, string(q), `{`+string(q)+`:[`+string(q)+`,{"k":`+string(q)+`}]}`)
	}
	for _, d := range docs {
		var v any
		if err := json.Unmarshal([]byte(d), &v); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		checkAny(t, v)
	}
	for _, v := range []any{math.NaN(), math.Inf(1), []any{math.Inf(-1)}, []any(nil), map[string]any(nil)} {
		checkAny(t, v)
	}
	// Other types are left to json.Marshal.
	for _, v := range []any{map[string]any{"a": 1}, int64(1), json.Number("1"), []string{"a"}, []any{float32(1)}} {
		if b, ok := jsonw.AppendAny(nil, v); ok {
			t.Errorf("AppendAny took %#v: %s", v, b)
		}
	}
}

func FuzzAppendAny(f *testing.F) {
	for _, d := range anyDocs {
		f.Add(d, 0.0)
	}
	f.Add(`1`, 1e21)
	f.Add(`1`, -1e-7)
	f.Fuzz(func(t *testing.T, d string, x float64) {
		checkAny(t, x)
		var v any
		if json.Unmarshal([]byte(d), &v) == nil {
			checkAny(t, v)
		}
	})
}
