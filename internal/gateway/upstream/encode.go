package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
// conversation only grows at its end and the tools do not change; the
// tools array is reused while it has as many tools. The adapter leaves
// *tools empty when the memo has them (toolsToEncode).
//
// *elems holds only the elements of the messages from from on, tail[i]
// being the index in req.Messages of the first message of (*elems)[i].
// from is what memoFrom returned (the messages after those of the memo:
// the new elements follow the memo's), or the memo's From (memoContinued:
// the new messages continue the memo's last element, which they replace),
// or 0 (all of them).
//
// lean, when not nil, encodes an element without the SDK (lean.go) or
// says it cannot.
//
// An error is the Turn's: a gateway.BadRequest.
func encodeBody[ES ~[]E, E, T any](req *gateway.Request, flavour string, stream bool, p any, elemsKey string, elems *ES, tools *[]T, from int, tail []int, lean func([]byte, *E) ([]byte, bool)) (body []byte, err error) {
	m := req.Encoded
	defer func() {
		if err != nil {
			if m != nil {
				resetMemo(m, flavour) // half updated: not used again
			}
			body, err = nil, gateway.BadRequest("", "encoding the upstream request: %v", err)
		}
	}()
	if m == nil {
		return json.Marshal(p)
	}
	if m.Flavour != flavour {
		resetMemo(m, flavour)
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
	// es[i] is the conversation's element off+i; the memo's first keep
	// elements are reused.
	off, keep := 0, max(0, min(len(m.Elems)-1, len(es)))
	if from > 0 {
		switch {
		case len(tail) != len(es) || m.Msgs == 0 || (len(m.Elems) > 0 && m.Base != len(m.Elems)-1):
			return nil, errMemo
		case from == m.Msgs:
			off = len(m.Elems)
		case from == m.From && len(m.Elems) > 0:
			off = m.Base
		default:
			return nil, errMemo
		}
		keep = off
	}
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
	switch {
	case len(es) > 0:
		m.From, m.Base = tail[len(es)-1], off+len(es)-1
	case len(m.Elems) == 0:
		m.From, m.Base = 0, 0
	case m.Base != len(m.Elems)-1:
		return nil, errMemo // the reopened element's messages made none
	}
	m.Msgs = len(req.Messages)
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
	return closeBody(openBody(m, top, elemsKey, keep, 0), m, top), nil
}

// openBody starts the body of memo m (whose other fields are top): the
// conversation's key and its elements, without the closing bracket. It is
// assembled in a new buffer (the one sent before may still be read by the
// HTTP client), with room for extra more bytes, or after the elements
// Prepare assembled (bodyPrefix) when none of them was rebuilt since: the
// memo's first keep elements are those it had then.
func openBody(m *gateway.Encoded, top []byte, elemsKey string, keep, extra int) []byte {
	var b []byte
	next := 0 // the first element not yet in b
	if p := m.Prefix; len(p) > 0 && m.PrefixElems > 0 && keep >= m.PrefixElems {
		b, next = p, m.PrefixElems
	} else {
		n := len(top) + len(elemsKey) + len(m.Tools) + 16 + prefixRoom + extra
		for _, e := range m.Elems {
			n += len(e) + 1
		}
		b = append(make([]byte, 0, n), '{')
	}
	m.Prefix, m.PrefixElems = nil, 0
	for i, e := range m.Elems[next:] {
		b = append(elemSep(b, i+next, elemsKey), e...)
	}
	return b
}

// elemSep appends what comes before element i of the conversation array.
func elemSep(b []byte, i int, elemsKey string) []byte {
	if i > 0 {
		return append(b, ',')
	}
	b = append(b, '"')
	b = append(b, elemsKey...)
	return append(b, `":[`...)
}

// closeBody ends the body openBody started: the conversation array
// closed, the tools and the other fields (top).
func closeBody(b []byte, m *gateway.Encoded, top []byte) []byte {
	rest := bytes.TrimSpace(top[1 : len(top)-1])
	if len(m.Elems) > 0 {
		b = append(b, ']')
	}
	if len(m.Tools) > 0 {
		if len(m.Elems) > 0 {
			b = append(b, ',')
		}
		b = append(b, `"tools":`...)
		b = append(b, m.Tools...)
	}
	if len(rest) > 0 {
		if len(m.Elems) > 0 || len(m.Tools) > 0 {
			b = append(b, ',')
		}
		b = append(b, rest...)
	}
	return append(b, '}')
}

// resultsWriter appends the conversation elements of req.Messages[mi], a
// message of tool results, one after the other (no separator), and the
// end of each in b to ends; false when it does not take the message
// (anything but text results), leaving b as it was.
type resultsWriter func(b []byte, req *gateway.Request, mi int, ends []int) ([]byte, []int, bool)

// directTurn is the body of the turn after Prepare's, when the memo holds
// the whole conversation but its last message, the tools' results: their
// elements are written straight from the message (results) and appended,
// with no SDK params built for them and nothing else encoded again.
// merges says that the adapter merges consecutive turns of one role
// (Messages, Gemini). ok is false when the turn is not that one (the
// memo lacks more, the other fields or the tools changed, the results
// would be merged into the memo's last element) or results does not take
// the message: the adapter then encodes the turn as usual (encodeBody),
// and the memo is as it was.
func directTurn(req *gateway.Request, flavour string, stream bool, elemsKey string, merges bool, results resultsWriter) (body []byte, ok bool) {
	m, n := req.Encoded, len(req.Messages)
	if m == nil || m.Flavour != flavour || m.Top == nil || m.TopKey != (gateway.TopKey{ToolChoice: req.ToolChoice, Stream: stream}) ||
		n < 2 || m.Msgs != n-1 || len(m.Elems) == 0 || m.Base != len(m.Elems)-1 || m.From >= m.Msgs ||
		m.NTools != len(req.Tools) || (len(req.Tools) > 0 && m.Tools == nil) ||
		req.Messages[n-1].Role != gateway.RoleUser || (merges && req.Messages[m.From].Role == gateway.RoleUser) {
		return nil, false
	}
	var endsBuf [8]int
	scratch, ends, ok := results(make([]byte, 0, 1024), req, n-1, endsBuf[:0])
	if !ok || len(ends) == 0 {
		return nil, false
	}
	keep := len(m.Elems)
	b := openBody(m, m.Top, elemsKey, keep, len(scratch)+len(ends))
	start := 0
	for i, end := range ends {
		e := scratch[start:end]
		b = append(elemSep(b, keep+i, elemsKey), e...)
		m.Elems = append(m.Elems, bytes.Clone(e))
		start = end
	}
	m.Msgs, m.From, m.Base = n, n-1, len(m.Elems)-1
	return closeBody(b, m, m.Top), true
}

// prefixRoom is what a body's buffer has to spare, so that the next Turn
// can append the tools' results to the part Prepare assembled.
const prefixRoom = 2048

// bodyPrefix keeps, of body (just assembled by encodeBody and not to be
// sent: Prepare's), the part up to the end of the conversation's last
// element: the next Turn appends the new elements to it.
func bodyPrefix(m *gateway.Encoded, body []byte, elemsKey string) {
	m.Prefix, m.PrefixElems = nil, 0
	if len(m.Elems) == 0 {
		return
	}
	n := len(`{"`) + len(elemsKey) + len(`":[`) + len(m.Elems) - 1
	for _, e := range m.Elems {
		n += len(e)
	}
	if n < len(body) && body[n] == ']' && string(body[:len(elemsKey)+5]) == `{"`+elemsKey+`":[` {
		m.Prefix, m.PrefixElems = body[:n], len(m.Elems)
	}
}

// resetMemo empties m for flavour.
func resetMemo(m *gateway.Encoded, flavour string) {
	if m.Next != nil {
		m.Next.Discard()
	}
	*m = gateway.Encoded{Flavour: flavour}
}

var errMemo = fmt.Errorf("encoding the request: the memo does not match the conversation")

// memoFrom is the first message of req the adapter needs to translate:
// with a memo of the same flavour, the first message after those it was
// made of, else 0.
func memoFrom(req *gateway.Request, flavour string) int {
	m := req.Encoded
	if m == nil {
		return 0
	}
	if m.Flavour != flavour {
		resetMemo(m, flavour)
	}
	if m.Msgs <= 0 || m.Msgs > len(req.Messages) || m.From >= m.Msgs || (len(m.Elems) > 0 && m.Base != len(m.Elems)-1) {
		// Nothing to skip, or not the conversation the memo was made
		// of: everything is translated (encodeBody keeps what matches).
		m.Msgs, m.From, m.Base = 0, 0, 0
		return 0
	}
	return m.Msgs
}

// memoContinued reports whether the elements an adapter that merges
// consecutive turns of one role (Messages, Gemini) made of the messages
// from from (memoFrom) on, whose first messages are tail, begin with a
// turn of the role of the memo's last element: the new messages continue
// it, and the adapter translates again from the memo's From, the first
// message of that element.
func memoContinued(req *gateway.Request, from int, tail []int) bool {
	m := req.Encoded
	return m != nil && from > 0 && from == m.Msgs && len(tail) > 0 && len(m.Elems) > 0 &&
		req.Messages[tail[0]].Role == req.Messages[m.From].Role
}

// mergedParams is params (an adapter that merges consecutive turns of
// one role) of req's messages from the memo's place on (memoFrom), or from
// the memo's From when the new messages continue its last element
// (memoContinued); it returns the params, the message they start at and
// their tail.
func mergedParams[P any](req *gateway.Request, flavour string, params func(*gateway.Request, int) (P, []int, error)) (P, int, []int, error) {
	from := memoFrom(req, flavour)
	p, tail, err := params(req, from)
	if err == nil && memoContinued(req, from, tail) {
		from = req.Encoded.From
		p, tail, err = params(req, from)
	}
	return p, from, tail, err
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
		resetMemo(m, flavour)
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
		fmt.Fprintf(&b, "\x00%s\x00%s\x00%s\x00%t\x00%s\x00%s", t.Name, t.Description, t.Parameters, t.Strict, t.Native, t.Container)
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

// prepare is the adapters' gateway.Preparer: body, the adapter's request
// encoder, brings the run's memo up to req's conversation (the request it
// encodes is not sent), and the exchange of the next Turn, to path, is
// made ready (readied). An error leaves the memo empty (encodeBody) or as
// it was, and comes again from the Turn that reports it.
func (e *Endpoint) prepare(ctx context.Context, req *gateway.Request, stream bool, body func(*gateway.Request, bool) ([]byte, error), elemsKey, path string, hdr http.Header) {
	m := req.Encoded
	if m == nil {
		return
	}
	if b, err := body(req, stream); err == nil {
		bodyPrefix(m, b, elemsKey)
	}
	if m.Next != nil {
		m.Next.Discard()
	}
	if r := e.ready(ctx, path, hdr); r != nil { // not a nil *readied in the interface
		m.Next = r
	} else {
		m.Next = nil
	}
}

// Prepare implements gateway.Preparer.
func (c *Responses) Prepare(ctx context.Context, req *gateway.Request, stream bool) {
	c.prepare(ctx, req, stream, responsesBody, "input", responsesPath, c.hdr)
}

// Prepare implements gateway.Preparer.
func (c *Messages) Prepare(ctx context.Context, req *gateway.Request, stream bool) {
	c.prepare(ctx, req, stream, messagesBody, "messages", messagesPath, c.hdr)
}

// Prepare implements gateway.Preparer.
func (c *Gemini) Prepare(ctx context.Context, req *gateway.Request, stream bool) {
	c.prepare(ctx, req, stream, geminiBody, "contents", geminiPath(req.Model, stream), c.hdr)
}

// Prepare implements gateway.Preparer.
func (c *Chat) Prepare(ctx context.Context, req *gateway.Request, stream bool) {
	c.prepare(ctx, req, stream, chatBody, "messages", chatPath, c.hdr)
}
