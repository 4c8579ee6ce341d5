package upstream

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/genai"

	"github.com/shellgate/shellgate/internal/jsontest"
)

// geminiFromSDK is what the Gemini adapter read from the genai SDK's type
// before its lean view: the reference the lean decoding must agree with.
func geminiFromSDK(r *genai.GenerateContentResponse) geminiAnswer {
	a := geminiAnswer{ResponseID: r.ResponseID, ModelVersion: r.ModelVersion}
	if pf := r.PromptFeedback; pf != nil {
		a.PromptFeedback = &geminiPromptFeedback{pf.BlockReason}
	}
	if u := r.UsageMetadata; u != nil {
		a.UsageMetadata = &geminiUsage{u.CachedContentTokenCount, u.CandidatesTokenCount, u.PromptTokenCount, u.ThoughtsTokenCount}
	}
	if r.Candidates != nil {
		a.Candidates = []geminiCandidate{}
	}
	for _, c := range r.Candidates {
		gc := geminiCandidate{FinishReason: c.FinishReason}
		if c.Content != nil {
			gc.Content = &geminiContent{Parts: []geminiAnswerPart{}}
			if c.Content.Parts == nil {
				gc.Content.Parts = nil
			}
			for _, p := range c.Content.Parts {
				gp := geminiAnswerPart{Thought: p.Thought, Text: p.Text}
				if fc := p.FunctionCall; fc != nil {
					gp.FunctionCall = &geminiCall{fc.ID, fc.Args, fc.Name}
				}
				gc.Content.Parts = append(gc.Content.Parts, gp)
			}
		}
		a.Candidates = append(a.Candidates, gc)
	}
	return a
}

// TestGeminiAnswerMatchesSDK: the lean view of a Gemini answer holds what
// the genai SDK's type decodes for the fields the adapter reads, and the
// turns built from both are equal, for answers with every kind of part
// and hostile strings; a null candidate or part is an empty one (the SDK's
// nil pointer made the adapter panic).
func TestGeminiAnswerMatchesSDK(t *testing.T) {
	var bodies []string
	for i, s := range jsontest.Strings() {
		q, _ := json.Marshal(s)
		bodies = append(bodies, fmt.Sprintf(`{"candidates":[{"content":{"role":"model","parts":[{"text":%s},{"text":"x","thought":true,"thoughtSignature":"c2ln"},{"functionCall":{"id":"c%d","name":%s,"args":{"code":%s,"n":1.5e3,"big":12345678901234567890,"nested":{"a":[1,null,true,{"b":%s}]}}}},{"text":%s}]},"finishReason":"STOP","index":0,"safetyRatings":[{"category":"HARM_CATEGORY_HATE_SPEECH","probability":"NEGLIGIBLE"}]}],"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":7,"cachedContentTokenCount":3,"thoughtsTokenCount":2,"totalTokenCount":20},"modelVersion":%s,"responseId":"r%d","createTime":"2026-12-01T10:00:00Z"}`,
			q, i, q, q, q, q, i, q, i))
	}
	bodies = append(bodies,
		`{"candidates":[{"content":{"parts":[{"functionCall":{"name":"shell"}}]},"finishReason":"MALFORMED_FUNCTION_CALL"}]}`,
		`{"candidates":[{"content":{"parts":[{"functionCall":{"name":"shell","args":null}}]}}]}`,
		`{"candidates":[{"finishReason":"SAFETY"}],"promptFeedback":{"blockReason":"SAFETY"}}`,
		`{"promptFeedback":{"blockReason":"OTHER"},"usageMetadata":{"promptTokenCount":4}}`,
		`{"candidates":[{"content":{"parts":[]},"finishReason":"MAX_TOKENS"},{"content":{"parts":[{"text":"second"}]}}]}`,
		`{"candidates":[{"content":{}}],"modelVersion":"m"}`,
		`{"candidates":[],"responseId":"x"}`,
		`{}`,
	)
	for _, body := range bodies {
		var sdk genai.GenerateContentResponse
		if err := json.Unmarshal([]byte(body), &sdk); err != nil {
			t.Fatalf("sdk: %v: %s", err, body)
		}
		var lean geminiAnswer
		if err := json.Unmarshal([]byte(body), &lean); err != nil {
			t.Fatalf("lean: %v: %s", err, body)
		}
		ref := geminiFromSDK(&sdk)
		if !reflect.DeepEqual(lean, ref) {
			t.Fatalf("lean view differs from the SDK's for %s:\nlean %+v\nsdk  %+v", body, lean, ref)
		}
		g1, g2 := newGeminiTurn(nil), newGeminiTurn(nil)
		if err := g1.add(&lean); err != nil {
			t.Fatal(err)
		}
		if err := g2.add(&ref); err != nil {
			t.Fatal(err)
		}
		if t1, t2 := g1.done(), g2.done(); !reflect.DeepEqual(t1, t2) {
			t.Fatalf("turns differ for %s: %+v %+v", body, t1, t2)
		}
	}
	// Both decoders refuse what is not the answer's shape in a field the
	// adapter reads.
	for _, bad := range []string{`[]`, `{"candidates":{}}`, `{"usageMetadata":{"promptTokenCount":"x"}}`,
		`{"usageMetadata":{"promptTokenCount":99999999999}}`, `{"candidates":[{"content":{"parts":[{"text":1}]}}]}`, `{"candidates":[{"content":{"parts":[{"functionCall":{"args":[]}}]}}]}`} {
		var sdk genai.GenerateContentResponse
		var lean geminiAnswer
		if json.Unmarshal([]byte(bad), &sdk) == nil || json.Unmarshal([]byte(bad), &lean) == nil {
			t.Errorf("%s decoded", bad)
		}
	}
	for _, body := range []string{`{"candidates":[null]}`, `{"candidates":[{"content":{"parts":[null,{"text":"a"}]}}]}`} {
		var lean geminiAnswer
		if err := json.Unmarshal([]byte(body), &lean); err != nil {
			t.Fatal(err)
		}
		g := newGeminiTurn(nil)
		if err := g.add(&lean); err != nil {
			t.Fatal(err)
		}
		if turn := g.done(); body != `{"candidates":[null]}` && (len(turn.Parts) != 1 || turn.Parts[0].Text != "a") {
			t.Errorf("%s: %+v", body, turn.Parts)
		}
	}
}
