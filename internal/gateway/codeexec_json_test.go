package gateway

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/jsonr"
	"github.com/shellgate/shellgate/internal/jsonr/jsonrtest"
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

var argsShapeNames = []string{"command", "code", "path", "restart", "view_range", "commands", "n"}

// read is argsShape's reader, made of what the tools' readers use.
func (a *argsShape) read(r *jsonr.Reader) bool {
	return r.Object(argsShapeNames, func(k int) bool {
		switch k {
		case 0:
			return jsonr.Ptr(r, &a.Command, r.Str)
		case 1:
			return jsonr.Ptr(r, &a.Code, r.Str)
		case 2:
			return r.Str(&a.Path)
		case 3:
			return r.Bool(&a.Restart)
		case 4:
			return jsonr.Slice(r, &a.ViewRange, func(v *int) bool {
				n := int64(*v)
				ok := r.Int(&n, strconv.IntSize)
				*v = int(n)
				return ok
			})
		case 5:
			return jsonr.Slice(r, &a.Commands, r.Str)
		default:
			return r.Int64(&a.N)
		}
	})
}

// TestDecodeArgsMatchesDecoder: decodeArgs, with a reader and without, gives what encoding/json's
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
	for _, s := range jsonrtest.Strings() {
		b, _ := json.Marshal(s)
		corpus = append(corpus, `{"command":`+string(b)+`,"path":`+string(b)+`}`)
	}
	read := 0
	for _, in := range corpus {
		ref := in
		if strings.TrimSpace(ref) == "" {
			ref = "{}"
		}
		var want argsShape
		werr := decodeArgsDecoder(ref, &want, `{"command": "..."}`)
		for _, withReader := range []bool{false, true} {
			var got argsShape
			var reader func(*jsonr.Reader) bool
			if withReader {
				reader = got.read
				var a argsShape
				if jsonr.Decode([]byte(ref), a.read) {
					read++
				}
			}
			gerr := decodeArgs(in, &got, `{"command": "..."}`, reader)
			if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() || gerr == nil && !reflect.DeepEqual(got, want) {
				t.Errorf("%.60q (reader %v): got %+v, %v; encoding/json: %+v, %v", in, withReader, got, gerr, want, werr)
			}
		}
	}
	if read < len(jsonrtest.Strings())/2 {
		t.Errorf("the reader took %d of %d arguments", read, len(corpus))
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
