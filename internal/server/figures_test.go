package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"google.golang.org/genai"

	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/internal/gateway/upstream"
)

// A Python call's figures: to the model in each upstream's own shape, and
// to each client API the way that API returns them.

const plotCode = "import matplotlib.pyplot as plt; plt.plot([1,2,3]); plt.show()"

// plotScript has the model plot with the code tool, then answer.
func plotScript(code string) *scripted.Script {
	args, _ := json.Marshal(map[string]string{"code": code})
	return &scripted.Script{Turns: []scripted.Turn{
		{ToolCalls: []scripted.ToolCall{{Name: "code_execution", Arguments: args}}},
		{Text: "Plotted."},
	}, Models: map[string][]scripted.Turn{
		// a replayed run: two assistant turns in the history, then this
		"replay": {{Text: "-"}, {Text: "-"}, {Text: "I see it again."}},
	}}
}

// toolResultImages are the images the body of an upstream request carries
// with tool results, in that upstream's own shape, as "mime;base64".
func toolResultImages(t *testing.T, api string, body map[string]any) []string {
	t.Helper()
	var out []string
	list := func(v any) []any { l, _ := v.([]any); return l }
	obj := func(v any) map[string]any { m, _ := v.(map[string]any); return m }
	dataURL := func(u string) string {
		meta, data, ok := strings.Cut(strings.TrimPrefix(u, "data:"), ",")
		if !ok || !strings.HasSuffix(meta, ";base64") {
			t.Fatalf("%s: image URL %.60q is not a base64 data: URL", api, u)
		}
		return strings.TrimSuffix(meta, ";base64") + ";" + data
	}
	switch api {
	case scripted.APIResponses:
		// function_call_output whose output is [input_text, input_image…]
		for _, it := range list(body["input"]) {
			if obj(it)["type"] != "function_call_output" {
				continue
			}
			for _, o := range list(obj(it)["output"]) {
				if obj(o)["type"] == "input_image" {
					out = append(out, dataURL(fmt.Sprint(obj(o)["image_url"])))
				}
			}
		}
	case scripted.APIMessages:
		// tool_result whose content is [text, image{source base64}…]
		for _, m := range list(body["messages"]) {
			for _, b := range list(obj(m)["content"]) {
				if obj(b)["type"] != "tool_result" {
					continue
				}
				for _, c := range list(obj(b)["content"]) {
					if src := obj(obj(c)["source"]); obj(c)["type"] == "image" && src["type"] == "base64" {
						out = append(out, fmt.Sprint(src["media_type"])+";"+fmt.Sprint(src["data"]))
					}
				}
			}
		}
	case scripted.APIGemini:
		// the user content of functionResponse parts, then inlineData parts
		for _, c := range list(body["contents"]) {
			resp := false
			for _, p := range list(obj(c)["parts"]) {
				if obj(p)["functionResponse"] != nil {
					resp = true
				}
				if d := obj(obj(p)["inlineData"]); d != nil && resp {
					out = append(out, fmt.Sprint(d["mimeType"])+";"+fmt.Sprint(d["data"]))
				}
			}
		}
	case scripted.APIChat:
		// the tool message, then a user message of image_url parts
		tool := false
		for _, m := range list(body["messages"]) {
			switch obj(m)["role"] {
			case "tool":
				tool = true
			case "user":
				for _, p := range list(obj(m)["content"]) {
					if obj(p)["type"] == "image_url" && tool {
						out = append(out, dataURL(fmt.Sprint(obj(obj(p)["image_url"])["url"])))
					}
				}
			}
		}
	}
	return out
}

// figureParts are the inlineData parts of parts as "mime;base64", and the
// kinds of all parts in order (partKinds, with "image" for inlineData).
func figureParts(t *testing.T, parts []*genai.Part) (images []string, kinds []string) {
	t.Helper()
	for _, p := range parts {
		if p.InlineData == nil {
			k, _ := partKinds([]*genai.Part{p})
			kinds = append(kinds, k...)
			continue
		}
		if !bytes.HasPrefix(p.InlineData.Data, []byte("\x89PNG\r\n\x1a\n")) {
			t.Fatalf("inlineData %s is not a PNG: %.16q", p.InlineData.MIMEType, p.InlineData.Data)
		}
		kinds = append(kinds, "image")
		images = append(images, p.InlineData.MIMEType+";"+base64.StdEncoding.EncodeToString(p.InlineData.Data))
	}
	return images, kinds
}

func TestGeminiCodeExecutionFigures(t *testing.T) {
	model := scripted.NewServer(plotScript(plotCode))
	t.Cleanup(model.Close)
	e := newEnv(t, "crun", "default", func(c *Config) { c.Models = upstream.EveryAPI(model.URL, 60*time.Second) })
	client := geminiClient(t, e, e.keyA)
	cfg := &genai.GenerateContentConfig{Tools: []*genai.Tool{{CodeExecution: &genai.ToolCodeExecution{}}}}
	want := "[code:PYTHON result:OUTCOME_OK image text]"
	for _, api := range []string{scripted.APIChat, scripted.APIResponses, scripted.APIMessages, scripted.APIGemini} {
		t.Run(api, func(t *testing.T) {
			model.Reset()
			resp, err := client.Models.GenerateContent(t.Context(), api+"/m", genai.Text("Plot 1, 2, 3."), cfg)
			if err != nil {
				t.Fatal(err)
			}
			images, kinds := figureParts(t, resp.Candidates[0].Content.Parts)
			if fmt.Sprint(kinds) != want || len(images) != 1 || !strings.HasPrefix(images[0], "image/png;") {
				t.Fatalf("parts %v, %d images", kinds, len(images))
			}
			// The model's next call carried the figure, in its API's shape.
			reqs := model.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d upstream calls", len(reqs))
			}
			if got := toolResultImages(t, api, reqs[0].Body); len(got) != 0 {
				t.Fatalf("the first call carried %d images", len(got))
			}
			if got := toolResultImages(t, api, reqs[1].Body); len(got) != 1 || got[0] != images[0] {
				t.Fatalf("the model got %d images (the same: %v) in %.600s", len(got), len(got) == 1 && got[0] == images[0], reqs[1].Raw)
			}

			// Streamed: the figure follows its result.
			var parts []*genai.Part
			for chunk, err := range client.Models.GenerateContentStream(t.Context(), api+"/m", genai.Text("Plot 1, 2, 3."), cfg) {
				if err != nil {
					t.Fatal(err)
				}
				if len(chunk.Candidates) > 0 && chunk.Candidates[0].Content != nil {
					parts = append(parts, chunk.Candidates[0].Content.Parts...)
				}
			}
			if images, kinds := figureParts(t, parts); fmt.Sprint(kinds) != want || len(images) != 1 {
				t.Fatalf("streamed parts %v, %d images", kinds, len(images))
			}

			// Replayed, the figure goes back to the model with its result.
			model.Reset()
			history := []*genai.Content{genai.NewContentFromText("Plot 1, 2, 3.", genai.RoleUser), resp.Candidates[0].Content,
				genai.NewContentFromText("And again?", genai.RoleUser)}
			again, err := client.Models.GenerateContent(t.Context(), api+"/replay", history, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, text := partKinds(again.Candidates[0].Content.Parts); text != "I see it again." {
				t.Fatalf("replay: %q", text)
			}
			if got := toolResultImages(t, api, model.Last().Body); len(got) != 1 || got[0] != images[0] {
				t.Fatalf("replay: the model got %d images", len(got))
			}
		})
	}
}

// Anthropic's code_execution_result has no image: a figure saved to a
// file comes back as a code_execution_output file id the Files API
// downloads, and a figure only shown reaches the model alone.
func TestMessagesLegacyCodeExecutionFigures(t *testing.T) {
	model := scripted.NewServer(plotScript("import matplotlib.pyplot as plt\nplt.plot([1,2,3])\nplt.savefig('chart.png')\nplt.show()"))
	t.Cleanup(model.Close)
	e := newEnv(t, "crun", "default", func(c *Config) { c.Models = upstream.EveryAPI(model.URL, 60*time.Second) })
	client := e.anthropic(e.keyA)
	m, err := client.Messages.New(t.Context(), anthropic.MessageNewParams{Model: "messages/m", MaxTokens: 100, Messages: userText("Plot 1, 2, 3."),
		Tools: []anthropic.ToolUnionParam{{OfCodeExecutionTool20250522: &anthropic.CodeExecutionTool20250522Param{}}}})
	if err != nil {
		t.Fatal(err)
	}
	bs := blocks(t, m)
	if got := types(bs); fmt.Sprint(got) != "[server_tool_use code_execution_tool_result text]" {
		t.Fatalf("blocks %v", got)
	}
	// Anthropic's own result: stdout, stderr, return_code and the output
	// files, nothing more.
	var res struct {
		Type    string `json:"type"`
		Content struct {
			Type       string           `json:"type"`
			ReturnCode int              `json:"return_code"`
			Content    []map[string]any `json:"content"`
		} `json:"content"`
	}
	raw, _ := json.Marshal(bs[1])
	json.Unmarshal(raw, &res)
	keys := map[string]bool{}
	for k := range bs[1]["content"].(map[string]any) {
		keys[k] = true
	}
	if res.Content.Type != "code_execution_result" || res.Content.ReturnCode != 0 || len(keys) != 5 ||
		len(res.Content.Content) != 1 || res.Content.Content[0]["type"] != "code_execution_output" {
		t.Fatalf("result %s", raw)
	}
	betas := []anthropic.AnthropicBeta{anthropic.AnthropicBetaFilesAPI2025_04_14}
	resp, err := client.Beta.Files.Download(t.Context(), fmt.Sprint(res.Content.Content[0]["file_id"]), anthropic.BetaFileDownloadParams{Betas: betas})
	if b := bodyOf(t, resp, err); !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("downloaded %.16q", b)
	}
	// The shown figure went to the model, as an image in the tool_result.
	reqs := model.Requests()
	if got := toolResultImages(t, scripted.APIMessages, reqs[len(reqs)-1].Body); len(got) != 1 || !strings.HasPrefix(got[0], "image/png;iVBORw0KGgo") {
		t.Fatalf("the model got %d images", len(got))
	}
}

// Three runs of four figures each: the model's last request carries the
// latest 8 (MaxServerToolImages) and the oldest run's result says its
// figures are no longer shown; the client still gets all 12.
func TestFiguresBoundedPerRequest(t *testing.T) {
	args, _ := json.Marshal(map[string]string{"code": "import matplotlib.pyplot as plt\nfor i in range(4):\n    plt.figure(); plt.plot([1, 2, i])\nplt.show()"})
	plot := scripted.Turn{ToolCalls: []scripted.ToolCall{{Name: "code_execution", Arguments: args}}}
	model := scripted.NewServer(&scripted.Script{Turns: []scripted.Turn{plot, plot, plot, {Text: "Three plots."}}})
	t.Cleanup(model.Close)
	e := newEnv(t, "crun", "default", func(c *Config) { c.Models = upstream.EveryAPI(model.URL, 60*time.Second) })
	client := geminiClient(t, e, e.keyA)
	cfg := &genai.GenerateContentConfig{Tools: []*genai.Tool{{CodeExecution: &genai.ToolCodeExecution{}}}}
	for _, api := range []string{scripted.APIMessages, scripted.APIResponses} {
		t.Run(api, func(t *testing.T) {
			model.Reset()
			resp, err := client.Models.GenerateContent(t.Context(), api+"/m", genai.Text("Plot three times."), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if images, _ := figureParts(t, resp.Candidates[0].Content.Parts); len(images) != 12 {
				t.Fatalf("the client got %d figures", len(images))
			}
			reqs := model.Requests()
			if len(reqs) != 4 {
				t.Fatalf("%d upstream calls", len(reqs))
			}
			for i, want := range []int{0, 4, 8, 8} {
				got := toolResultImages(t, api, reqs[i].Body)
				noted := strings.Contains(string(reqs[i].Raw), "no longer shown")
				if len(got) != want || noted != (i == 3) {
					t.Fatalf("upstream call %d: %d images (want %d), note %v", i, len(got), want, noted)
				}
			}
		})
	}
}
