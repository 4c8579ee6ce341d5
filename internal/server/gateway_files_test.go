package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/gateway/gatewaytest"
)

// Files into and out of a gateway conversation, with the official SDKs:
// workspace files named in the request are copied into the container
// before its first command, and files the commands write come back as
// container files (Responses) or as workspace file ids (Messages).

const salesCSV = "region,revenue\nnorth,10\nsouth,5\nnorth,2.5\n"

func TestResponsesFileIDs(t *testing.T) {
	g := newGatewayEnv(t)
	client := g.openAI(g.keyA)
	f, err := client.Files.New(t.Context(), openai.FileNewParams{File: openai.File(strings.NewReader(salesCSV), "sales.csv", "text/csv"), Purpose: openai.FilePurposeUserData})
	if err != nil {
		t.Fatal(err)
	}
	g.script(
		gatewaytest.Turn{Parts: []gateway.Part{shellCall("call_1",
			`python3 -c "import pandas as pd; df = pd.read_csv('/mnt/data/sales.csv'); print(df[df.region == 'north'].revenue.sum())"`,
			`mkdir -p out && grep -c north sales.csv > out/north.txt`)}},
		gatewaytest.EchoResult())
	r, err := g.newResponse(t, g.keyA, "north revenue?", map[string]any{
		"tools": []any{map[string]any{"type": "shell", "environment": map[string]any{"type": "container_auto", "file_ids": []string{f.ID}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var stdout []string
	var cid string
	for _, it := range r.Output {
		switch it.Type {
		case "shell_call_output":
			for _, c := range it.AsShellCallOutput().Output {
				stdout = append(stdout, c.Stdout)
			}
		case "shell_call":
			cid = it.AsShellCall().Environment.ContainerID
		}
	}
	if len(stdout) != 2 || stdout[0] != "12.5\n" || cid == "" {
		t.Fatalf("outputs %q in %q (response %s)", stdout, cid, r.RawJSON())
	}
	// A new container is billed its 30-second minimum even though copying
	// the file in started it before the first command.
	var usage struct {
		CostDetails struct {
			ServerToolCost float64 `json:"server_tool_cost"`
		} `json:"cost_details"`
	}
	if err := json.Unmarshal([]byte(r.Usage.RawJSON()), &usage); err != nil || usage.CostDetails.ServerToolCost < 0.003 {
		t.Fatalf("cost %+v (%v), want at least the new-container minimum", usage, err)
	}
	// What the command wrote is a container file the client can list and
	// download.
	iter := client.Containers.Files.ListAutoPaging(t.Context(), cid, openai.ContainerFileListParams{})
	found := ""
	for iter.Next() {
		if strings.HasSuffix(iter.Current().Path, "out/north.txt") {
			found = iter.Current().ID
		}
	}
	if err := iter.Err(); err != nil || found == "" {
		t.Fatalf("out/north.txt not listed (%v)", err)
	}
	resp, err := client.Containers.Files.Content.Get(t.Context(), cid, found)
	if b := bodyOf(t, resp, err); string(b) != "2\n" {
		t.Fatalf("downloaded %q", b)
	}
	// An unknown file id is 404, and the model is never called.
	s := g.script(gatewaytest.EchoResult())
	_, err = g.newResponse(t, g.keyA, "x", map[string]any{
		"tools": []any{map[string]any{"type": "shell", "environment": map[string]any{"type": "container_auto", "file_ids": []string{"file_0123456789abcdef0123456789abcdef"}}}},
	})
	if !isStatus(err, 404) || len(s.Requests()) != 0 {
		t.Fatalf("unknown file: %v, %d model calls", err, len(s.Requests()))
	}
}

func TestMessagesContainerUpload(t *testing.T) {
	e := newGatewayEnv(t)
	betas := []anthropic.AnthropicBeta{anthropic.AnthropicBetaFilesAPI2025_04_14}
	client := e.anthropic(e.keyA)
	f, err := client.Beta.Files.Upload(t.Context(), anthropic.BetaFileUploadParams{File: anthropic.File(strings.NewReader(salesCSV), "sales.csv", "text/csv"), Betas: betas})
	if err != nil {
		t.Fatal(err)
	}
	s, model := e.scriptAs("upload",
		gatewaytest.Turn{Parts: []gateway.Part{gatewaytest.Call("toolu_1", "bash_code_execution",
			map[string]string{"command": `grep -c north "$INPUT_DIR/sales.csv" > "$OUTPUT_DIR/north.txt" && cat "$OUTPUT_DIR/north.txt"`})}},
		gatewaytest.EchoResult())
	m, err := client.Messages.New(t.Context(), anthropic.MessageNewParams{Model: model, MaxTokens: 100, Tools: codeExecTool,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("how many north rows?"), anthropic.NewContainerUploadBlock(f.ID))}})
	if err != nil {
		t.Fatal(err)
	}
	// The model was told where the file is.
	first := s.Requests()[0]
	var note string
	for _, p := range first.Messages[0].Parts {
		note += p.Text
	}
	if !strings.Contains(note, "$INPUT_DIR/sales.csv") {
		t.Fatalf("the model was not told about the upload: %q", note)
	}
	var fileID string
	for _, b := range m.Content {
		if b.Type == "bash_code_execution_tool_result" {
			r := b.AsBashCodeExecutionToolResult().Content.AsResponseBashCodeExecutionResultBlock()
			if r.Stdout != "2\n" || r.ReturnCode != 0 || len(r.Content) != 1 {
				t.Fatalf("result %+v", r)
			}
			fileID = r.Content[0].FileID
		}
	}
	if fileID == "" {
		t.Fatalf("no output file in %s", m.RawJSON())
	}
	resp, err := client.Beta.Files.Download(t.Context(), fileID, anthropic.BetaFileDownloadParams{Betas: betas})
	if b := bodyOf(t, resp, err); string(b) != "2\n" {
		t.Fatalf("downloaded %q", b)
	}
	// Another workspace cannot download it.
	other := e.anthropic(e.keyB)
	if _, err := other.Beta.Files.Download(t.Context(), fileID, anthropic.BetaFileDownloadParams{Betas: betas}); err == nil {
		t.Fatal("another workspace downloaded the output file")
	}
}
