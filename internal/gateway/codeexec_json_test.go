package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/jsontest"
)

// argsShape has a field of each kind the code-execution tools decode.
type argsShape struct {
	Command   *string  `json:"command"`
	Code      *string  `json:"code"`
	Path      string   `json:"path"`
	Restart   bool     `json:"restart"`
	ViewRange []int    `json:"view_range"`
	Commands  []string `json:"commands"`
	N         int64    `json:"n"`
}

// TestDecodeArgsMatchesDecoder: decodeArgs gives what encoding/json's
// Decoder gives (value, acceptance and error text) on well-formed,
// hostile and malformed arguments.
func TestDecodeArgsMatchesDecoder(t *testing.T) {
	corpus := []string{
		``, ` `, `{}`, `null`, `[]`, `"x"`, `1`, `true`,
		`{"command":"ls"}`, `{"command":null}`, `{"command":1}`, `{"COMMAND":"case"}`, `{"Command":"a","command":"b"}`,
		`{"code":"print(1)"}`, `{"code":"\ud800"}`, "{\"code\":\"\xff\xfe\"}", `{"code":"\u0000"}`, `{"code":"a\"b\\c\/d\n"}`,
		`{"command":"view","path":"a.txt","view_range":[1,-1]}`, `{"view_range":[1.5]}`, `{"view_range":{"0":1}}`, `{"view_range":[1,null]}`,
		`{"restart":true}`, `{"restart":"true"}`, `{"restart":1}`, `{"commands":["a","b"]}`, `{"commands":[1]}`,
		`{"n":1.0}`, `{"n":1e3}`, `{"n":-0}`, `{"n":9223372036854775808}`, `{"n":null}`, `{"extra":{"a":[1,2,{}]},"path":"p"}`,
		`{"command":"ls"`, `{"command":"ls"}}`, `{"command":"ls"}]`, `{"command":"ls"} trailing`, `{"command":"ls"} {"command":"x"}`,
		`  {"command":"ls"}  `, `{"command":"ls",}`, `{'command':'ls'}`, strings.Repeat(`[`, 10001) + strings.Repeat(`]`, 10001),
	}
	for _, s := range jsontest.Strings() {
		b, _ := json.Marshal(s)
		corpus = append(corpus, `{"command":`+string(b)+`,"path":`+string(b)+`}`)
	}
	for _, in := range corpus {
		ref := in
		if strings.TrimSpace(ref) == "" {
			ref = "{}"
		}
		var want, got argsShape
		werr := decodeArgsDecoder(ref, &want, `{"command": "..."}`)
		gerr := decodeArgs(in, &got, `{"command": "..."}`)
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() || gerr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%.60q: got %+v, %v; encoding/json: %+v, %v", in, got, gerr, want, werr)
		}
	}
}

// TestSchemaProperties: positional arguments of a tool called from code
// fill its schema's properties in the order the client wrote them.
func TestSchemaProperties(t *testing.T) {
	for schema, want := range map[string]string{
		`{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"object","properties":{"x":{}}},"mid":{}}}`: "zeta,alpha,mid",
		`{"type":"object"}`:  "",
		`{"properties":[1]}`: "",
		`not json`:           "",
	} {
		if got := strings.Join(schemaProperties([]byte(schema)), ","); got != want {
			t.Errorf("%s: %q, want %q", schema, got, want)
		}
	}
}
