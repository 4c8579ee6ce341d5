package jsonw_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/jsonw"
	"github.com/shellgate/shellgate/internal/jsonw/jsonwtest"
)

func TestAppendStringIsEncodingJSON(t *testing.T) {
	for _, s := range jsonwtest.Strings() {
		check(t, s)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range jsonwtest.Strings()[:30] {
		f.Add(s)
	}
	f.Fuzz(check)
}

func check(t *testing.T, s string) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	if got, want := string(jsonw.AppendStringNoHTML(nil, s)), strings.TrimSuffix(buf.String(), "\n"); got != want {
		t.Fatalf("AppendStringNoHTML(%q) = %q, want %q", s, got, want)
	}
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	got := jsonw.AppendString([]byte("prefix"), s)
	if string(got[:6]) != "prefix" || string(got[6:]) != string(want) {
		t.Fatalf("AppendString(%q) = %q, want %q", s, got, want)
	}
}
