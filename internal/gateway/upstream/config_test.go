package upstream

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfig(t *testing.T) {
	yml := `
providers:
  openai:
    api: responses
    base_url: https://api.openai.com/v1
    api_key_env: OPENAI_API_KEY
    models: [gpt-5, gpt-5-mini]
  anthropic:
    api: messages
    base_url: https://api.anthropic.com
    api_key_env: ANTHROPIC_API_KEY
    models: [claude-sonnet-4-5]
    timeout: 30s
  local:
    api: chat_completions
    base_url: http://127.0.0.1:11434/v1
    headers: {X-Title: shellgate}
broadcast:   # internal/broadcast's: accepted here, not read
  - {type: otlp_http, endpoint: http://127.0.0.1:4318}
`
	path := filepath.Join(t.TempDir(), "providers.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPENAI_API_KEY", "sk-o")
	t.Setenv("ANTHROPIC_API_KEY", "sk-a")
	ps, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ps.List(), []string{"anthropic/claude-sonnet-4-5", "openai/gpt-5", "openai/gpt-5-mini"}; !reflect.DeepEqual(got, want) {
		t.Errorf("List %v, want %v", got, want)
	}
	m, err := ps.Resolve("openai/gpt-5")
	if err != nil || m.Provider != "openai" || m.Name != "gpt-5" || m.API != gateway.APIResponses {
		t.Fatalf("Resolve: %+v %v", m, err)
	}
	if r, ok := m.Upstream.(*Responses); !ok || r.APIKey != "sk-o" {
		t.Errorf("upstream %T %+v", m.Upstream, m.Upstream)
	}
	// A model name may itself hold slashes (OpenRouter's vendor/model).
	m, err = ps.Resolve("local/qwen/qwen3-8b")
	if err != nil || m.Name != "qwen/qwen3-8b" || m.API != gateway.APIChat {
		t.Fatalf("Resolve: %+v %v", m, err)
	}
	if c := m.Upstream.(*Chat); c.Header.Get("X-Title") != "shellgate" || c.APIKey != "" {
		t.Errorf("local endpoint %+v", c.Endpoint)
	}
	a, _ := ps.Resolve("anthropic/claude-sonnet-4-5")
	if a.Upstream.(*Messages).Timeout != 30*time.Second {
		t.Errorf("timeout %v", a.Upstream.(*Messages).Timeout)
	}

	_, err = ps.Resolve("nope/x")
	if re, ok := err.(*gateway.RequestError); !ok || re.Status != http.StatusNotFound || !strings.Contains(re.Message, "anthropic, local, openai") {
		t.Errorf("unknown provider: %v", err)
	}
	for _, bad := range []string{"gpt-5", "openai/", "/gpt-5", ""} {
		_, err = ps.Resolve(bad)
		if re, ok := err.(*gateway.RequestError); !ok || re.Status != http.StatusBadRequest || re.Param != "model" {
			t.Errorf("Resolve(%q): %v", bad, err)
		}
	}
}

// TestAliases: an alias resolves (through another alias too) to its
// provider's model on every lookup, and GET /v1/models lists it.
func TestAliases(t *testing.T) {
	ps, err := ParseConfig([]byte("providers:\n  a: {api: responses, base_url: http://x, models: [m1, m2]}\n  b: {api: gemini, base_url: http://y}\n"+
		"aliases:\n  gemini-2.5-flash: a/m1\n  gpt-5: b/vendor/gpt-5\n  fast: gemini-2.5-flash\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]gateway.Model{
		"gemini-2.5-flash": {Provider: "a", Name: "m1", API: gateway.APIResponses},
		"fast":             {Provider: "a", Name: "m1", API: gateway.APIResponses},
		"gpt-5":            {Provider: "b", Name: "vendor/gpt-5", API: gateway.APIGemini},
		"a/m2":             {Provider: "a", Name: "m2", API: gateway.APIResponses},
	} {
		m, err := ps.Resolve(name)
		if err != nil || m.Provider != want.Provider || m.Name != want.Name || m.API != want.API || m.Upstream == nil {
			t.Errorf("Resolve(%q) = %+v, %v; want %+v", name, m, err, want)
		}
	}
	if got, want := ps.List(), []string{"a/m1", "a/m2", "fast", "gemini-2.5-flash", "gpt-5"}; !reflect.DeepEqual(got, want) {
		t.Errorf("List %v, want %v", got, want)
	}
	_, err = ps.Resolve("gemini-9")
	if re, ok := err.(*gateway.RequestError); !ok || re.Status != http.StatusBadRequest || !strings.Contains(re.Message, "or an alias: fast, gemini-2.5-flash, gpt-5") {
		t.Errorf("unknown alias: %v", err)
	}
}

// aliasCfg is a provider a with two listed models, then the aliases key.
const aliasCfg = "providers:\n  a: {api: responses, base_url: http://x, models: [m1, m2]}\naliases:\n"

func TestBadConfig(t *testing.T) {
	cases := []struct {
		name, yml, want string
	}{
		{"01 not yaml", "providers: [", "not a valid config"},
		{"02 no providers", "providers: {}", "providers: none"},
		{"03 unknown field", "providers:\n  a: {api: responses, base_url: http://x, modles: [a]}", "modles"},
		{"04 no api", "providers:\n  a: {base_url: http://x}", "providers.a.api: required"},
		{"05 bad api", "providers:\n  a: {api: completions, base_url: http://x}", "providers.a.api"},
		{"06 no base_url", "providers:\n  a: {api: responses}", "providers.a.base_url: required"},
		{"07 bad base_url", "providers:\n  a: {api: responses, base_url: 'ftp://x'}", "providers.a.base_url"},
		{"08 bad timeout", "providers:\n  a: {api: responses, base_url: http://x, timeout: soon}", "providers.a.timeout"},
		{"09 key unset", "providers:\n  a: {api: responses, base_url: http://x, api_key_env: NOPE_KEY}", "providers.a.api_key_env: the environment variable NOPE_KEY is not set"},
		{"10 slash in name", "providers:\n  a/b: {api: responses, base_url: http://x}", "providers.a/b"},
		{"11 bad model", "providers:\n  a: {api: responses, base_url: http://x, models: ['']}", "providers.a.models[0]"},
		{"12 wrong type", "providers:\n  a: {api: responses, base_url: http://x, models: 3}", "not a valid config"},
		{"13 alias to no provider", aliasCfg + "  fast: b/m1", "aliases.fast: target \"b/m1\" names no configured provider (configured: a)"},
		{"14 alias to an unlisted model", aliasCfg + "  fast: a/m3", "aliases.fast: target \"a/m3\" is not among provider a's models (m1, m2)"},
		{"15 alias to a bare name", aliasCfg + "  fast: m1", "aliases.fast: target \"m1\" is neither an alias nor provider/model"},
		{"16 alias cycle", aliasCfg + "  x: y\n  y: z\n  z: x", "aliases.x: the aliases form a cycle (x -> y -> z -> x)"},
		{"17 alias to itself", aliasCfg + "  x: x", "aliases.x: the aliases form a cycle (x -> x)"},
		{"18 duplicate alias", aliasCfg + "  x: a/m1\n  x: a/m2", "mapping key \"x\" already defined"},
		{"19 alias hides a model", aliasCfg + "  a/m9: a/m1", "aliases.a/m9: the name is provider a's model already"},
		{"20 alias with a space", aliasCfg + "  'a b': a/m1", "aliases: \"a b\" is not a model name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.yml), env(nil))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one with %q", err, c.want)
			}
		})
	}
}

// TestConfigNativeTools: native_tools and vendor_tools reach the resolved
// model; a hosted tool the provider's API does not have is an error.
func TestConfigNativeTools(t *testing.T) {
	ps, err := ParseConfig([]byte(`
providers:
  openai: {api: responses, base_url: http://x, native_tools: [shell, code_interpreter]}
  anthropic: {api: messages, base_url: http://x, native_tools: [code_execution], vendor_tools: sandbox}
  google: {api: gemini, base_url: http://x, native_tools: [code_execution], vendor_tools: native}
  local: {api: chat_completions, base_url: http://x}
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"openai/m": "[shell code_interpreter] false", "anthropic/m": "[code_execution] true",
		"google/m": "[code_execution] false", "local/m": "[] false",
	} {
		m, err := ps.Resolve(name)
		if got := fmt.Sprintf("%v %v", m.Native, m.VendorSandbox); err != nil || got != want {
			t.Errorf("%s: %s (%v), want %s", name, got, err, want)
		}
	}
	for _, c := range []struct{ yml, want string }{
		{"providers:\n  a: {api: messages, base_url: http://x, native_tools: [shell]}", `providers.a.native_tools[0]: "shell" is not a hosted tool of the messages API (it has: code_execution)`},
		{"providers:\n  a: {api: chat_completions, base_url: http://x, native_tools: [code_execution]}", "providers.a.native_tools[0]"},
		{"providers:\n  a: {api: responses, base_url: http://x, vendor_tools: openrouter}", `providers.a.vendor_tools: "openrouter" is not native or sandbox`},
	} {
		if _, err := ParseConfig([]byte(c.yml), env(nil)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one with %q", err, c.want)
		}
	}
}
