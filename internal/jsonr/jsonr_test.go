package jsonr

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/shellgate/shellgate/internal/jsonr/jsonrtest"
)

// docs is valid JSON a Reader must take whole.
var docs = []string{
	`null`, `true`, `false`, `0`, `-0`, `12`, `-12.5e+3`, `1E2`, `0.001`, `""`, `"a"`,
	`"\"\\\/\b\f\n\r\t"`, `"\u00e9\u4e2d\ud83d\ude00"`, `"é中😀"`, `"x\u0000y"`,
	`[]`, `[1,"a",null,true,[{}]]`, ` { "a" : [ 1 , 2 ] , "b" : { } } `,
	`{"a":{"b":{"c":[1,{"d":"e"}]}}}`, `{"":1}`, `[1e308,-1e-308]`,
}

// invalid is what encoding/json refuses; a Reader must refuse it too.
var invalid = []string{
	``, ` `, `nul`, `nulll`, `tru`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `"`, `"abc`, `"\x"`, `"\u12"`,
	"\"a\x01\"", `[`, `[1,]`, `[,1]`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{a:1}`, `{"a":1 "b":2}`, `[1 2]`,
	`{"a":1}}`, `1 2`, `]`, `{"a":[}`, `NaN`, `Infinity`, `'a'`,
}

// unsupported is valid JSON a Reader refuses rather than decode it
// differently from encoding/json.
var unsupported = []string{
	"\"\xff\"", `"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, `{"a":1,"a":2}`, `[1e400]`,
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
}

func anyOf(data string) (any, bool) {
	var v any
	ok := Decode([]byte(data), func(r *Reader) bool {
		var ok bool
		v, ok = r.Any()
		return ok
	})
	return v, ok
}

func TestAnyMatchesEncodingJSON(t *testing.T) {
	var all []string
	all = append(all, docs...)
	for _, s := range jsonrtest.Strings() {
		q, _ := json.Marshal(s)
		all = append(all, string(q), `{"k":`+string(q)+`,"n":[`+string(q)+`]}`)
	}
	for _, d := range all {
		got, ok := anyOf(d)
		var want any
		if err := json.Unmarshal([]byte(d), &want); err != nil {
			t.Fatalf("encoding/json refuses %q: %v", d, err)
		}
		if !ok {
			if !utf8.ValidString(d) {
				continue // invalid UTF-8 in the source: refused on purpose
			}
			t.Errorf("Any refused %q", d)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Any(%q) = %#v, encoding/json %#v", d, got, want)
		}
		if !Decode([]byte(d), (*Reader).Skip) {
			t.Errorf("Skip refused %q", d)
		}
		if s, ok := String([]byte(d)); ok != (strings.TrimSpace(d)[0] == '"') || ok && s != want {
			t.Errorf("String(%q) = %q, %v", d, s, ok)
		}
		var raw json.RawMessage
		if !Decode([]byte(d), func(r *Reader) bool { return r.Raw(&raw) }) || string(raw) != strings.TrimSpace(d) {
			t.Errorf("Raw(%q) = %q", d, raw)
		}
	}
}

func TestRefusals(t *testing.T) {
	for _, d := range invalid {
		if json.Valid([]byte(d)) {
			t.Fatalf("%q is valid JSON", d)
		}
		if _, ok := anyOf(d); ok {
			t.Errorf("Any took invalid %q", d)
		}
		if Decode([]byte(d), (*Reader).Skip) {
			t.Errorf("Skip took invalid %q", d)
		}
	}
	for _, d := range unsupported {
		if !json.Valid([]byte(d)) {
			t.Fatalf("%q is not valid JSON", d)
		}
		if _, ok := anyOf(d); ok {
			t.Errorf("Any took %q", d)
		}
	}
}

// fields is a struct read by Object, and the same with encoding/json.
type fields struct {
	Name  string          `json:"name"`
	N     int64           `json:"n"`
	Small int32           `json:"small"`
	On    bool            `json:"on"`
	Raw   json.RawMessage `json:"raw"`
}

var fieldNames = []string{"name", "n", "small", "on", "raw"}

func (f *fields) read(r *Reader) bool {
	return r.Object(fieldNames, func(k int) bool {
		switch k {
		case 0:
			return r.Str(&f.Name)
		case 1:
			return r.Int(&f.N, 64)
		case 2:
			return r.Int32(&f.Small)
		case 3:
			return r.Bool(&f.On)
		default:
			return r.Raw(&f.Raw)
		}
	})
}

func TestObjectMatchesEncodingJSON(t *testing.T) {
	took := []string{
		`{}`, `null`, `{"name":"a","n":-9223372036854775808,"small":2147483647,"on":true,"raw":{"x": [1, 2]}}`,
		`{"name":null,"n":null,"small":null,"on":null,"raw":null}`, `{"other":{"name":1},"name":"b"}`,
		`{"raw":"\u00e9"}`, `{"name":"\ud83d\ude00"}`, `{"on":false,"Other":1}`,
	}
	for _, d := range took {
		var got, want fields
		if !Decode([]byte(d), got.read) {
			t.Errorf("refused %q", d)
			continue
		}
		if err := json.Unmarshal([]byte(d), &want); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %+v, encoding/json %+v (%v)", d, got, want, err)
		}
	}
	refused := []string{
		`{"Name":"a"}`, `{"NAME":"a"}`, `{"na\u006de":"a"}`, `{"name":"a","name":"b"}`, `{"n":1.0}`, `{"n":1e2}`,
		`{"n":9223372036854775808}`, `{"small":2147483648}`, `{"name":1}`, `{"n":"1"}`, `{"on":"true"}`, `[]`,
		`{"\u212a":1}`, `{"name":"a"} x`,
	}
	for _, d := range refused {
		var got fields
		if Decode([]byte(d), got.read) {
			t.Errorf("took %q: %+v", d, got)
		}
	}
}

// FuzzMatchesEncodingJSON: whatever a Reader takes, encoding/json takes
// and decodes to the same value — as any, and into a struct.
func FuzzMatchesEncodingJSON(f *testing.F) {
	for _, d := range append(append(docs, invalid...), unsupported[:6]...) {
		f.Add(d)
	}
	f.Add(`{"name":"a","n":1,"small":-2,"on":true,"raw":[1,{"a":null}]}`)
	f.Fuzz(func(t *testing.T, d string) {
		if got, ok := anyOf(d); ok {
			var want any
			if err := json.Unmarshal([]byte(d), &want); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("Any(%q) = %#v, encoding/json %#v (%v)", d, got, want, err)
			}
		}
		if Decode([]byte(d), (*Reader).Skip) && !json.Valid([]byte(d)) {
			t.Fatalf("Skip took invalid %q", d)
		}
		if s, ok := String([]byte(d)); ok {
			var want string
			if err := json.Unmarshal([]byte(d), &want); err != nil || s != want {
				t.Fatalf("String(%q) = %q, encoding/json %q (%v)", d, s, want, err)
			}
		}
		var got, want fields
		if Decode([]byte(d), got.read) {
			if err := json.Unmarshal([]byte(d), &want); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: %+v, encoding/json %+v (%v)", d, got, want, err)
			}
		}
	})
}
