package responses

import (
	"encoding/base64"
	"encoding/json"
	"path"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/shellgate/shellgate/internal/gateway"
)

// code_interpreter steps as the live API shows them (the openai SDKs'
// ResponseCodeInterpreterToolCall; vercel/ai's recorded
// openai-code-interpreter-tool fixtures):
//
//	{"id":"ci_…","type":"code_interpreter_call","status":"completed","code":"…",
//	 "container_id":"cntr_…","outputs":[{"type":"logs","logs":"…"},{"type":"image","url":"data:image/png;base64,…"}]}
//
// outputs is null unless the request's include has
// "code_interpreter_call.outputs". Streamed: output_item.added
// (in_progress, code "", outputs [] or null), code_interpreter_call.in_progress,
// code_interpreter_call_code.delta and .done, code_interpreter_call.interpreting,
// then, once the code ran, code_interpreter_call.completed and
// output_item.done.
//
// Files the code wrote in /mnt/data are cited on the next message's
// output_text as container_file_citation annotations (citer).

// interpItem is a code_interpreter_call item.
type interpItem struct {
	ID          string `json:"id"`
	Type        string `json:"type"` // code_interpreter_call
	Status      string `json:"status"`
	Code        string `json:"code"`
	ContainerID string `json:"container_id"`
	Outputs     []any  `json:"outputs"` // null without the include
}

type interpLogs struct {
	Type string `json:"type"` // logs
	Logs string `json:"logs"`
}

type interpImage struct {
	Type string `json:"type"` // image
	URL  string `json:"url"`
}

// isInterp reports whether step is a code_interpreter call.
func isInterp(step *gateway.Step) bool { return step.Call.Name == interpFunction }

// interpCode is the code of a code_interpreter call, as far as its
// arguments say.
func interpCode(step *gateway.Step) string {
	if d, ok := step.Result.Detail.(*gateway.InterpreterDetail); ok && d.Code != "" {
		return d.Code
	}
	var a struct {
		Code string `json:"code"`
	}
	json.Unmarshal([]byte(step.Call.Arguments), &a)
	return a.Code
}

// interpPending is the item of a call about to run (output_item.added).
func (m *meta) interpPending(id string, step *gateway.Step) interpItem {
	it := interpItem{ID: id, Type: "code_interpreter_call", Status: "in_progress", ContainerID: m.containerOf(step)}
	if m.p.ciOutputs {
		it.Outputs = []any{}
	}
	return it
}

// interpDone is the item of a finished call: completed when the code ran
// through (an exception included: its traceback is in the logs),
// incomplete when it was interrupted at its timeout, failed when it did
// not run (refused arguments, the budget spent, the sandbox unavailable;
// the logs then say what the model read).
func (m *meta) interpDone(id string, step *gateway.Step) interpItem {
	it := interpItem{ID: id, Type: "code_interpreter_call", Status: "failed", Code: interpCode(step), ContainerID: m.containerOf(step)}
	d, _ := step.Result.Detail.(*gateway.InterpreterDetail)
	ran := d != nil && d.Ran
	if ran {
		it.Status = "completed"
		if d.Output.Outcome.Type == "timeout" {
			it.Status = "incomplete"
		}
	}
	if !m.p.ciOutputs {
		return it
	}
	it.Outputs = []any{}
	if !ran {
		it.Outputs = append(it.Outputs, interpLogs{Type: "logs", Logs: step.Result.Content})
		return it
	}
	logs := gateway.PythonStdout(d.Output)
	if stderr := gateway.PythonStderr(d.Output); stderr != "" {
		if logs != "" && !strings.HasSuffix(logs, "\n") {
			logs += "\n"
		}
		logs += stderr
	}
	if logs != "" {
		it.Outputs = append(it.Outputs, interpLogs{Type: "logs", Logs: logs})
	}
	for _, img := range gateway.PythonImages(d.Output) {
		it.Outputs = append(it.Outputs, interpImage{Type: "image", URL: "data:" + img.MIME + ";base64," + base64.StdEncoding.EncodeToString(img.Data)})
	}
	return it
}

// citer collects the files the code_interpreter steps wrote until a
// message cites them.
type citer struct {
	files []gateway.ChangedFile // in the order first written
	at    map[string]int        // file id → index in files
}

// add records the files step wrote.
func (c *citer) add(step *gateway.Step) {
	d, ok := step.Result.Detail.(*gateway.InterpreterDetail)
	if !ok {
		return
	}
	for _, f := range d.Changed {
		if i, ok := c.at[f.ID]; ok {
			c.files[i] = f
			continue
		}
		if c.at == nil {
			c.at = map[string]int{}
		}
		c.at[f.ID] = len(c.files)
		c.files = append(c.files, f)
	}
}

// cite returns the container_file_citation annotations of a message's
// text for the files written since the last message, and forgets them.
// A citation spans where the text names the file (sandbox:/mnt/data/…,
// /mnt/data/… or /workspace/home/…, as the live API cites the sandbox:
// link); a file the text does not name is cited at its end, zero wide.
// Indices count characters (Unicode code points).
func (c *citer) cite(text, containerID string) []any {
	if len(c.files) == 0 {
		return nil
	}
	end := utf8.RuneCountInString(text)
	cites := make([]fileCitation, 0, len(c.files))
	for _, f := range c.files {
		fc := fileCitation{Type: "container_file_citation", ContainerID: containerID, FileID: f.ID, Filename: path.Base(f.Path), StartIndex: end, EndIndex: end}
		for _, root := range []string{"sandbox:/mnt/data/", "/mnt/data/", "sandbox:/workspace/home/", "/workspace/home/"} {
			name := root + strings.TrimPrefix(f.Path, "/")
			if i := strings.Index(text, name); i >= 0 {
				fc.StartIndex = utf8.RuneCountInString(text[:i])
				fc.EndIndex = fc.StartIndex + utf8.RuneCountInString(name)
				break
			}
		}
		cites = append(cites, fc)
	}
	sort.SliceStable(cites, func(i, j int) bool { return cites[i].StartIndex < cites[j].StartIndex })
	c.files, c.at = nil, nil
	out := make([]any, len(cites))
	for i, fc := range cites {
		out[i] = fc
	}
	return out
}
