package identity

import (
	"errors"
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	forty := strings.Repeat("r", 40)
	cases := []struct {
		name string
		req  Request
		want Choice
	}{
		{"01 nothing sent: a new container", Request{}, Choice{Source: FromNew}},
		{"02 body session_id", Request{BodySessionID: "abc_1-2"}, Choice{"abc_1-2", FromBodySession}},
		{"03 header when the body has none", Request{HeaderSessionID: "hdr"}, Choice{"hdr", FromHeaderSession}},
		{"04 prompt_cache_key last", Request{PromptCacheKey: "pck"}, Choice{"pck", FromPromptCacheKey}},
		{"05 body beats header and prompt_cache_key", Request{BodySessionID: "b", HeaderSessionID: "h", PromptCacheKey: "p"}, Choice{"b", FromBodySession}},
		{"06 header beats prompt_cache_key", Request{HeaderSessionID: "h", PromptCacheKey: "p"}, Choice{"h", FromHeaderSession}},
		{"07 exactly 20 characters kept whole", Request{BodySessionID: "abcdefghij0123456789"}, Choice{"abcdefghij0123456789", FromBodySession}},
		{"08 21 characters: the last 20", Request{BodySessionID: "Xabcdefghij0123456789"}, Choice{"abcdefghij0123456789", FromBodySession}},
		{"09 long ids with the same ending share a container", Request{HeaderSessionID: "conversation-0123456789abcdefghij"}, Choice{"0123456789abcdefghij", FromHeaderSession}},
		{"10 a slash makes session_id ignored: header used", Request{BodySessionID: "user-42/chat", HeaderSessionID: "h"}, Choice{"h", FromHeaderSession}},
		{"11 a space makes session_id ignored: new container", Request{BodySessionID: "a b"}, Choice{Source: FromNew}},
		{"12 a dot is not allowed", Request{BodySessionID: "a.b"}, Choice{Source: FromNew}},
		{"13 non-ASCII letters are not allowed", Request{BodySessionID: "caf\u00e9"}, Choice{Source: FromNew}},
		{"14 an invalid session_id falls back to the conversation", Request{BodySessionID: "../x", ConversationContainerIDs: []string{"cntr_a"}}, Choice{"cntr_a", FromConversation}},
		{"15 invalid everywhere: prompt_cache_key with a colon ignored too", Request{BodySessionID: "a/b", HeaderSessionID: "c d", PromptCacheKey: "e:f"}, Choice{Source: FromNew}},
		{"16 invalid header, valid prompt_cache_key", Request{HeaderSessionID: "a;b", PromptCacheKey: "ok"}, Choice{"ok", FromPromptCacheKey}},
		{"17 container_reference beats session_id", Request{ContainerReference: "cntr_x", BodySessionID: "s"}, Choice{"cntr_x", FromReference}},
		{"18 container_reference of 40 characters is never truncated", Request{ContainerReference: forty}, Choice{forty, FromReference}},
		{"19 container_reference of 1 character", Request{ContainerReference: "a"}, Choice{"a", FromReference}},
		{"20 the most recent conversation container wins", Request{ConversationContainerIDs: []string{"old", "mid", "new1"}}, Choice{"new1", FromConversation}},
		{"21 unusable conversation ids are skipped", Request{ConversationContainerIDs: []string{"good", "bad/id", strings.Repeat("x", 41)}}, Choice{"good", FromConversation}},
		{"22 a session beats the conversation", Request{PromptCacheKey: "p", ConversationContainerIDs: []string{"c"}}, Choice{"p", FromPromptCacheKey}},
		{"23 only unusable conversation ids: new container", Request{ConversationContainerIDs: []string{"", "a b"}}, Choice{Source: FromNew}},
		{"24 a long session id longer than 40 still gives its last 20", Request{BodySessionID: strings.Repeat("a", 30) + strings.Repeat("b", 20)}, Choice{strings.Repeat("b", 20), FromBodySession}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Choose(c.req)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("Choose = %+v, want %+v", got, c.want)
			}
			if got.New() != (c.want.Source == FromNew) {
				t.Fatalf("New() = %v for %+v", got.New(), got)
			}
		})
	}
}

func TestChooseBadReference(t *testing.T) {
	cases := []struct {
		name string
		ref  string
	}{
		{"01 41 characters are not truncated but refused", strings.Repeat("r", 41)},
		{"02 a slash", "cntr/x"},
		{"03 a path", "../../etc"},
		{"04 a space", "my container"},
		{"05 a huge reference", strings.Repeat("z", 10_000)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Even with a valid session and conversation, a bad explicit
			// reference is an error, never a silent fallback.
			got, err := Choose(Request{ContainerReference: c.ref, BodySessionID: "s", ConversationContainerIDs: []string{"c"}})
			if !errors.Is(err, ErrBadReference) {
				t.Fatalf("Choose = %+v, %v; want ErrBadReference", got, err)
			}
			if len(err.Error()) > 300 {
				t.Fatalf("error message not clipped: %d bytes", len(err.Error()))
			}
		})
	}
}

func TestSessionKey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"a", "a"},
		{"abcdefghijklmnopqrst", "abcdefghijklmnopqrst"},
		{"0abcdefghijklmnopqrst", "abcdefghijklmnopqrst"},
	} {
		if got := SessionKey(c.in); got != c.want {
			t.Errorf("SessionKey(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
