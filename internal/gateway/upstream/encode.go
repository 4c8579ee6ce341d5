package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/shellgate/shellgate/internal/gateway"
)

// encodeBody is the JSON body of params p, whose conversation array is
// *elems (under the key elemsKey) and tools array *tools. Without a memo
// it is json.Marshal(p). With req.Encoded it marshals only what is new
// since the previous turn of the run — the conversation's new elements,
// the tools once, the other fields when the tool choice or streaming
// changed — and splices them together (the same JSON value as p's, with
// the conversation and the tools first).
//
// The memo relies on the loop's promise (gateway.Request.Encoded): the
// conversation only grows at its end and the tools do not change. Every
// element encoded before is reused but the last, which an adapter may
// extend with what was appended (Messages merges consecutive turns of
// one role); the tools array is reused while it has as many tools.
// The adapter leaves *tools empty when the memo has them (toolsToEncode).
//
// tail, when not nil, says that *elems holds only the elements of the
// messages from memoFrom(req) on (the adapter translated no earlier
// message), tail[i] being the index in req.Messages of the first message
// of (*elems)[i]; the memo's elements before Base are kept as they are.
// With tail nil, *elems is the whole conversation.
//
// lean, when not nil, encodes an element without the SDK (lean.go) or
// says it cannot.
func encodeBody[ES ~[]E, E, T any](req *gateway.Request, flavour string, stream bool, p any, elemsKey string, elems *ES, tools *[]T, tail []int, lean func([]byte, *E) ([]byte, bool)) ([]byte, error) {
	m := req.Encoded
	if m == nil {
		return json.Marshal(p)
	}
	if m.Flavour != flavour {
		*m = gateway.Encoded{Flavour: flavour}
	}
	es, ts := *elems, *tools
	// Of the other fields the loop changes only the tool choice.
	key := gateway.TopKey{ToolChoice: req.ToolChoice, Stream: stream}
	top := m.Top
	if top == nil || m.TopKey != key {
		*elems, *tools = nil, nil
		var err error
		top, err = json.Marshal(p)
		*elems, *tools = es, ts
		if err != nil {
			return nil, err
		}
		if len(top) < 2 || top[0] != '{' || top[len(top)-1] != '}' {
			return nil, fmt.Errorf("encoding the request: not a JSON object")
		}
		m.Top, m.TopKey = top, key
	}
	// es[i] is the conversation's element off+i.
	off := 0
	if tail != nil && m.From > 0 {
		if len(tail) != len(es) || m.Base >= len(m.Elems) {
			return nil, fmt.Errorf("encoding the request: the memo does not match the conversation")
		}
		off = m.Base
	}
	keep := max(off, min(len(m.Elems)-1, off+len(es)))
	m.Elems = m.Elems[:keep]
	var scratch []byte // the lean encoders write here, each element is then copied once
	for i := keep - off; i < len(es); i++ {
		if lean != nil {
			if scratch == nil {
				scratch = make([]byte, 0, 1024)
			}
			var ok bool
			if scratch, ok = lean(scratch[:0], &es[i]); ok {
				m.Elems = append(m.Elems, bytes.Clone(scratch))
				continue
			}
		}
		b, err := json.Marshal(es[i])
		if err != nil {
			return nil, err
		}
		m.Elems = append(m.Elems, b)
	}
	if tail != nil && len(es) > 0 {
		m.From, m.Base = tail[len(es)-1], off+len(es)-1
	} else {
		m.From, m.Base = 0, 0
	}
	if len(ts) > 0 || m.NTools != len(req.Tools) {
		b, err := json.Marshal(ts)
		if err != nil {
			return nil, err
		}
		m.Tools, m.NTools = b, len(req.Tools)
		if len(ts) == 0 {
			m.Tools = nil
		} else {
			sharedTools.put(flavour, req.Tools, b)
		}
	}
	n := len(top) + len(elemsKey) + len(m.Tools) + 16
	for _, e := range m.Elems {
		n += len(e) + 1
	}
	var b bytes.Buffer
	b.Grow(n)
	b.WriteByte('{')
	sep := false
	if len(m.Elems) > 0 {
		b.WriteByte('"')
		b.WriteString(elemsKey)
		b.WriteString(`":[`)
		for i, e := range m.Elems {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(e)
		}
		b.WriteByte(']')
		sep = true
	}
	if len(m.Tools) > 0 {
		if sep {
			b.WriteByte(',')
		}
		b.WriteString(`"tools":`)
		b.Write(m.Tools)
		sep = true
	}
	if rest := bytes.TrimSpace(top[1 : len(top)-1]); len(rest) > 0 {
		if sep {
			b.WriteByte(',')
		}
		b.Write(rest)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// memoFrom is the first message of req the adapter needs to translate:
// with a memo of the same flavour that holds elements, the first message
// of its last element (encodeBody's tail), else 0.
func memoFrom(req *gateway.Request, flavour string) int {
	m := req.Encoded
	if m == nil {
		return 0
	}
	if m.Flavour != flavour {
		*m = gateway.Encoded{Flavour: flavour}
	}
	if m.From <= 0 || m.From >= len(req.Messages) || m.Base >= len(m.Elems) {
		// Nothing to skip, or not the conversation the memo was made
		// of: everything is translated (encodeBody keeps what matches).
		m.From, m.Base = 0, 0
		return 0
	}
	return m.From
}

// memoTools says whether the run's memo holds the encoded tools, so the
// adapter need not build them again; it takes them from the runs before
// when they had the same tools (the server tools' functions are the same
// in every run).
func memoTools(req *gateway.Request, flavour string) bool {
	m := req.Encoded
	if m == nil || len(req.Tools) == 0 {
		return false
	}
	if m.Flavour != flavour {
		*m = gateway.Encoded{Flavour: flavour}
	}
	if m.Tools == nil || m.NTools != len(req.Tools) {
		m.Tools, m.NTools = sharedTools.get(flavour, req.Tools), len(req.Tools)
	}
	return m.Tools != nil
}

// toolsToEncode is req.Tools, or none when the memo holds them encoded.
func toolsToEncode(req *gateway.Request, flavour string) []gateway.Tool {
	if memoTools(req, flavour) {
		return nil
	}
	return req.Tools
}

// sharedTools remembers the encoded tools arrays of recent runs, by flavour
// and content, at most toolsCacheSize of them (all forgotten when full).
var sharedTools = toolsCache{m: map[string][]byte{}}

const toolsCacheSize = 256

type toolsCache struct {
	mu sync.Mutex
	m  map[string][]byte
}

func toolsKey(flavour string, tools []gateway.Tool) string {
	var b strings.Builder
	b.WriteString(flavour)
	for _, t := range tools {
		fmt.Fprintf(&b, "\x00%s\x00%s\x00%s\x00%t", t.Name, t.Description, t.Parameters, t.Strict)
	}
	return b.String()
}

func (c *toolsCache) get(flavour string, tools []gateway.Tool) []byte {
	k := toolsKey(flavour, tools)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *toolsCache) put(flavour string, tools []gateway.Tool, enc []byte) {
	k := toolsKey(flavour, tools)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= toolsCacheSize {
		clear(c.m)
	}
	c.m[k] = enc
}
