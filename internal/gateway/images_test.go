package gateway

import (
	"fmt"
	"strings"
	"testing"
)

func imgs(n int) []Image {
	out := make([]Image, n)
	for i := range out {
		out[i] = Image{MediaType: "image/png", Data: fmt.Sprintf("%d", i)}
	}
	return out
}

// The images of server-tool results sent to the model are those of the
// latest results, at most MaxServerToolImages; older results lose theirs,
// whole, and their text says so once.
func TestBoundImages(t *testing.T) {
	for _, c := range []struct {
		name    string
		counts  []int // images per result, oldest first
		kept    []int // images each keeps
		changed bool
	}{
		{"1 under the cap", []int{4, 4}, []int{4, 4}, false},
		{"2 one over", []int{4, 4, 1}, []int{0, 4, 1}, true},
		{"3 all older go", []int{1, 4, 4, 4}, []int{0, 0, 4, 4}, true},
		{"4 a result that does not fit ends the kept ones", []int{1, 3, 4, 2}, []int{0, 0, 4, 2}, true},
		{"5 results without images are skipped", []int{4, 0, 4, 0}, []int{4, 0, 4, 0}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rs []*ToolResult
			for i, n := range c.counts {
				rs = append(rs, &ToolResult{CallID: fmt.Sprint(i), Content: "out", Images: imgs(n)})
			}
			if got := boundImages(rs, MaxServerToolImages); got != c.changed {
				t.Fatalf("changed %v", got)
			}
			for i, r := range rs {
				if len(r.Images) != c.kept[i] {
					t.Fatalf("result %d keeps %d images, want %d", i, len(r.Images), c.kept[i])
				}
				dropped := c.counts[i] - c.kept[i]
				if noted := strings.Contains(r.Content, "no longer shown"); noted != (dropped > 0) ||
					(dropped > 0 && r.Content != "out"+fmt.Sprintf(ImagesDroppedNote, dropped, MaxServerToolImages)) {
					t.Fatalf("result %d: %q", i, r.Content)
				}
			}
			// Bounding again changes nothing: each result is noted once.
			if boundImages(rs, MaxServerToolImages) {
				t.Fatal("bounded twice")
			}
		})
	}
}

// Replayed results count only when they answer a server tool's call.
func TestServerToolImages(t *testing.T) {
	msgs := []Message{
		{Role: RoleAssistant, Parts: []Part{{Kind: PartToolCall, Call: &ToolCall{ID: "a", Name: CodeExecution}}, {Kind: PartToolCall, Call: &ToolCall{ID: "b", Name: "screenshot"}}}},
		{Role: RoleUser, Parts: []Part{{Kind: PartToolResult, Result: &ToolResult{CallID: "a", Images: imgs(1)}}, {Kind: PartToolResult, Result: &ToolResult{CallID: "b", Images: imgs(2)}}}},
	}
	got := serverToolImages(msgs, map[string]ServerTool{CodeExecution: CodeTool{}})
	if len(got) != 1 || got[0].CallID != "a" {
		t.Fatalf("%+v", got)
	}
}
