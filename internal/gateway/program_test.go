package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/jsrun"
)

func programRunner(t *testing.T) *jsrun.Runner {
	t.Helper()
	r, err := jsrun.NewRunner(jsrun.Config{Secret: []byte(strings.Repeat("k", 32)), Store: jsrun.NewMemoryStore(), OrderedObjects: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// A program's tool calls pause it with a continuation; the answers resume
// it, the calls it made before are replayed, not made again.
func TestProgramPausesAndResumes(t *testing.T) {
	ctx := context.Background()
	pt := ProgramTool{Runner: programRunner(t), Scope: "ws", Tools: []Tool{{Name: "get_weather"}}, Denied: []string{"delete_all"}}
	call := ToolCall{ID: "call_1", Name: ProgramFunction, Arguments: `{"code":"const [a, b] = await Promise.all([tools.get_weather({city: \"Paris\"}), tools.get_weather({city: \"Oslo\", days: [1, 2]})]);\nlet d; try { await tools.delete_all({}) } catch (e) { d = e.message }\nconst c = await tools.get_weather({city: a + b});\nreturn {c, d}"}`}
	st := pt.Run(ctx, nil, call, nil)
	if len(st.Paused) != 2 || st.State == "" || st.Content != "" {
		t.Fatalf("first run: %+v", st)
	}
	if st.Paused[0].Name != "get_weather" || st.Paused[0].Arguments != `{"city":"Paris"}` || st.Paused[1].Arguments != `{"city":"Oslo","days":[1,2]}` {
		t.Fatalf("paused calls: %+v", st.Paused)
	}
	rs := &Resume{Call: call, State: st.State, Answers: []ToolAnswer{{Call: st.Paused[0].ID, Content: "sun"}, {Call: st.Paused[1].ID, Content: "snow"}}}
	st2 := pt.Resume(ctx, nil, rs, nil)
	if len(st2.Paused) != 1 || st2.Paused[0].Arguments != `{"city":"sunsnow"}` || st2.State == "" {
		t.Fatalf("second run: %+v", st2)
	}
	st3 := pt.Resume(ctx, nil, &Resume{Call: call, State: st2.State, Answers: []ToolAnswer{{Call: st2.Paused[0].ID, Content: "warm"}}}, nil)
	if st3.IsError || st3.Paused != nil {
		t.Fatalf("third run: %+v", st3)
	}
	want := `{"c":"warm","d":"the tool delete_all cannot be called from a program: its allowed_callers do not include \"programmatic\""}`
	if st3.Content != want || st3.Detail.(*ProgramDetail).Result != want {
		t.Fatalf("result %q, want %q", st3.Content, want)
	}
	// A continuation resumes once.
	again := pt.Resume(ctx, nil, &Resume{Call: call, State: st2.State, Answers: []ToolAnswer{{Call: st2.Paused[0].ID, Content: "warm"}}}, nil)
	if re, ok := again.Fatal.(*RequestError); !ok || re.Status != 400 || !strings.Contains(re.Message, "fingerprint") {
		t.Fatalf("reused continuation: %+v", again)
	}
}

// A fingerprint that was changed, or made for other code or another
// scope, is the client's error; a tool error throws in the program.
func TestProgramBadResume(t *testing.T) {
	ctx := context.Background()
	r := programRunner(t)
	pt := ProgramTool{Runner: r, Scope: "ws", Tools: []Tool{{Name: "f"}}}
	call := ToolCall{ID: "call_1", Name: ProgramFunction, Arguments: `{"code":"try { return await tools.f() } catch (e) { return 'caught: ' + e.message }"}`}
	st := pt.Run(ctx, nil, call, nil)
	if len(st.Paused) != 1 || st.Paused[0].Arguments != `{}` {
		t.Fatalf("run: %+v", st)
	}
	ans := []ToolAnswer{{Call: st.Paused[0].ID, Content: "boom", IsError: true}}
	for name, rs := range map[string]*Resume{
		"tampered":    {Call: call, State: st.State[:len(st.State)-2] + "AA", Answers: ans},
		"other scope": {Call: call, State: st.State, Answers: ans},
		"other code":  {Call: ToolCall{ID: "call_1", Name: ProgramFunction, Arguments: `{"code":"return await tools.f()"}`}, State: st.State, Answers: ans},
	} {
		tool := pt
		if name == "other scope" {
			tool.Scope = "other"
		}
		got := tool.Resume(ctx, nil, rs, nil)
		if re, ok := got.Fatal.(*RequestError); !ok || re.Status != 400 {
			t.Errorf("%s: %+v", name, got)
		}
	}
	got := pt.Resume(ctx, nil, &Resume{Call: call, State: st.State, Answers: ans}, nil)
	if got.IsError || got.Content != "caught: the tool reported an error: boom" {
		t.Fatalf("error answer: %+v", got)
	}
	bad := pt.Run(ctx, nil, ToolCall{ID: "c2", Arguments: `{"code":"throw new RangeError('nope')"}`}, nil)
	if !bad.IsError || !strings.Contains(bad.Content, "RangeError: nope") {
		t.Fatalf("throwing program: %+v", bad)
	}
}
