package tool

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/shellgate/shellgate/sandbox"
)

// TestKernelAnswerHostile feeds the host's reader of the kernel client's
// answer what a hostile sandbox could print instead: everything it keeps
// stays bounded and valid, and what is not the driver's is dropped.
func TestKernelAnswerHostile(t *testing.T) {
	a := &kernelAnswer{maxChars: 100}
	feed := func(s string) {
		// In odd pieces, as pipes deliver.
		for len(s) > 0 {
			n := min(len(s), 7)
			a.feed(1, []byte(s[:n]))
			s = s[n:]
		}
	}
	feed("not json\n{\"t\":\"bogus\"}\n")
	feed(strings.Repeat("x", maxKernelLine+10) + "\n")
	for range 2000 {
		feed(`{"t":"note","text":"` + strings.Repeat("é", 2000) + `"}` + "\n")
	}
	png := base64.StdEncoding.EncodeToString(append([]byte("\x89PNG"), make([]byte, 100)...))
	big := base64.StdEncoding.EncodeToString(make([]byte, MaxPythonImageBytes+1))
	feed(`{"t":"display","data":{"image/png":"!!!"}}` + "\n")
	feed(`{"t":"display","data":{"image/png":"` + big + `"}}` + "\n")
	for range 20 {
		feed(`{"t":"display","data":{"image/png":"` + png + `","text/plain":"` + strings.Repeat("p", 500) + `"}}` + "\n")
	}
	feed(`{"t":"stream","name":"stdout","text":"` + strings.Repeat("\xff", 50) + strings.Repeat("o", 1000) + `"}` + "\n")
	feed(`{"t":"error","ename":"E","evalue":"v","traceback":["` + strings.Repeat(`\u001b[31mline\u001b[0m","`, 200) + `end"]}` + "\n")
	feed(`{"t":"done","timed_out":false,"stdout_chars":5000000}` + "\n")
	feed(`{"t":"stream","name":"stdout","text":"after done"}` + "\n")
	o := a.result(sandbox.Result{}, PythonCall{MaxOutputLength: 100})

	if a.images() != MaxPythonImages {
		t.Errorf("%d images kept, want %d", a.images(), MaxPythonImages)
	}
	if n := len(o.Displays); n > MaxPythonImages+8 {
		t.Errorf("%d displays kept", n)
	}
	for _, d := range o.Displays {
		if !d.IsImage() && utf8.RuneCountInString(d.Text) > 100+100 {
			t.Errorf("display text not capped: %d", len(d.Text))
		}
	}
	if len(o.Notes) > maxKernelNotes+200 || !utf8.ValidString(o.Notes) {
		t.Errorf("notes: %d bytes, valid %v", len(o.Notes), utf8.ValidString(o.Notes))
	}
	if !strings.Contains(o.Stdout, TruncationMarker) || strings.Contains(o.Stdout, "after done") || !utf8.ValidString(o.Stdout) {
		t.Errorf("stdout %q", o.Stdout)
	}
	tb := strings.Join(o.Error.Traceback, "\n")
	if strings.Contains(tb, "\x1b") || utf8.RuneCountInString(tb) > 300 {
		t.Errorf("traceback: %d chars %q", utf8.RuneCountInString(tb), tb[:min(len(tb), 80)])
	}
	if a.bad < 4 || !strings.Contains(o.Notes, "not understood") && !strings.Contains(o.Notes, "further notes dropped") {
		t.Errorf("bad lines %d, notes %q", a.bad, o.Notes[:min(80, len(o.Notes))])
	}
}

// TestKernelAnswerToolCall is the host's check of a client tool call the
// kernel reports (programmatic tool calling): only a well-formed call of
// an allowed tool, with a JSON object under the size bound, pauses the
// execution; anything else is dropped with a note and the answer does not
// read as paused.
func TestKernelAnswerToolCall(t *testing.T) {
	const token = "0123456789abcdef01234567"
	answer := func(lines ...string) PythonOutput {
		a := &kernelAnswer{maxChars: 100, tools: []string{"get_weather"}}
		for _, l := range lines {
			a.feed(1, []byte(l+"\n"))
		}
		return a.result(sandbox.Result{}, PythonCall{MaxOutputLength: 100})
	}
	o := answer(`{"t":"stream","name":"stdout","text":"before\n"}`,
		`{"t":"tool_call","call":"`+token+`","name":"get_weather","input":{ "city" : "Paris" }}`, `{"t":"paused"}`)
	if len(o.ToolCalls) != 1 || o.ToolCalls[0].Call != token || o.ToolCalls[0].Name != "get_weather" || string(o.ToolCalls[0].Input) != `{"city":"Paris"}` || o.Notes != "" {
		t.Fatalf("a good call: %+v %+v", o.ToolCalls, o)
	}
	for name, line := range map[string]string{
		"a tool not allowed":  `{"t":"tool_call","call":"` + token + `","name":"rm_rf","input":{}}`,
		"a malformed token":   `{"t":"tool_call","call":"../../x","name":"get_weather","input":{}}`,
		"input not an object": `{"t":"tool_call","call":"` + token + `","name":"get_weather","input":[1]}`,
		"input over the bound": `{"t":"tool_call","call":"` + token + `","name":"get_weather","input":{"a":"` +
			strings.Repeat("x", MaxToolInput) + `"}}`,
	} {
		o := answer(line, `{"t":"paused"}`)
		if o.ToolCalls != nil || !strings.Contains(o.Notes, "tool call from the kernel was refused") || !strings.Contains(o.Notes, "answer ended early") {
			t.Errorf("%s: calls %+v, notes %q", name, o.ToolCalls, o.Notes)
		}
	}
	// Calls made together (asyncio.gather) pause together; a token twice
	// is refused.
	const token2 = "76543210fedcba9876543210"
	o = answer(`{"t":"tool_call","call":"`+token+`","name":"get_weather","input":{}}`,
		`{"t":"tool_call","call":"`+token2+`","name":"get_weather","input":{"second":1}}`,
		`{"t":"tool_call","call":"`+token+`","name":"get_weather","input":{"third":1}}`, `{"t":"paused"}`)
	if len(o.ToolCalls) != 2 || string(o.ToolCalls[0].Input) != `{}` || o.ToolCalls[1].Call != token2 || !strings.Contains(o.Notes, "the same call token twice") {
		t.Errorf("calls made together: %+v, notes %q", o.ToolCalls, o.Notes)
	}
	var many []string
	for i := range MaxToolBatch + 1 {
		many = append(many, fmt.Sprintf(`{"t":"tool_call","call":"%024x","name":"get_weather","input":{}}`, i))
	}
	if o := answer(append(many, `{"t":"paused"}`)...); len(o.ToolCalls) != MaxToolBatch || !strings.Contains(o.Notes, "more than") {
		t.Errorf("%d calls at once kept, notes %q", len(o.ToolCalls), o.Notes)
	}
	o = answer(`{"t":"tool_call","call":"`+token+`","name":"get_weather","input":{}}`, `{"t":"done","timed_out":false}`)
	if o.ToolCalls != nil || !strings.Contains(o.Notes, "did not pause") {
		t.Errorf("a call without the pause: %+v", o)
	}
	o = answer(`{"t":"expired","why":"the execution waited more than 300 s for the result of get_weather and was ended","waited":true}`)
	if !strings.Contains(o.Expired, "300 s") || !o.ExpiredWaiting || o.ToolCalls != nil {
		t.Errorf("expired: %+v", o)
	}
	o = answer(`{"t":"expired","why":"another Python call came to the container's kernel"}`)
	if o.Expired == "" || o.ExpiredWaiting {
		t.Errorf("expired by another call: %+v", o)
	}
}
