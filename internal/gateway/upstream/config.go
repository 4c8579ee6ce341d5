package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/shellgate/shellgate/internal/gateway"
)

// Config is the provider config file (`shellgate serve --config FILE`):
//
//	providers:
//	  openai:
//	    api: responses                  # chat_completions, responses, messages or gemini
//	    base_url: https://api.openai.com/v1
//	    api_key_env: OPENAI_API_KEY     # the variable holding the key; optional (local servers)
//	    models: [gpt-5, gpt-5-mini]     # optional: what GET /v1/models lists
//	    timeout: 120s                   # optional, default 120s
//	    headers: {HTTP-Referer: https://example.com}   # optional, sent with every call
//	    native_tools: [shell, code_interpreter]         # optional: hosted tools the provider runs itself
//	    vendor_tools: sandbox           # optional: run shell/code_interpreter/code_execution_* in the sandbox anyway
//
//	aliases:                          # optional: other names for models
//	  gemini-2.5-flash: local/qwen3
//	  gpt-5: openrouter/openai/gpt-5
//
// A model "openai/gpt-5" goes to provider openai as model "gpt-5". An
// alias is resolved wherever a model name is (every client API) and listed
// by GET /v1/models; its target is a configured provider's model (one the
// provider lists, if it lists any) or another alias. The same file's
// `broadcast:` list (trace destinations) is read by internal/broadcast.
type Config struct {
	Providers map[string]ProviderConfig `yaml:"providers"`
	Aliases   map[string]string         `yaml:"aliases"`
	Broadcast yaml.Node                 `yaml:"broadcast"`
}

// ProviderConfig is one provider of the config file.
type ProviderConfig struct {
	API       string            `yaml:"api"`
	BaseURL   string            `yaml:"base_url"`
	APIKeyEnv string            `yaml:"api_key_env"`
	Models    []string          `yaml:"models"`
	Timeout   string            `yaml:"timeout"`
	Headers   map[string]string `yaml:"headers"`
	// NativeTools are the hosted tools the provider's API runs itself
	// (gateway's NativeShell and NativeCodeInterpreter on responses,
	// NativeCodeExecution on messages and gemini): a server tool on engine
	// auto uses the provider's own.
	NativeTools []string `yaml:"native_tools"`
	// VendorTools "sandbox" runs the provider's own tool types in
	// Shellgate's sandbox even when NativeTools lists them; "" or
	// "native" lets the provider run them.
	VendorTools string `yaml:"vendor_tools"`
}

// nativeFor says which native tools each API flavour has.
var nativeFor = map[string][]string{
	gateway.APIResponses: {gateway.NativeShell, gateway.NativeCodeInterpreter},
	gateway.APIMessages:  {gateway.NativeCodeExecution},
	gateway.APIGemini:    {gateway.NativeCodeExecution},
}

var providerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// LoadConfig reads the provider config at path and resolves each
// provider's key from its environment variable.
func LoadConfig(path string) (*Providers, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("provider config: %w", err)
	}
	p, err := ParseConfig(b, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("provider config %s: %w", path, err)
	}
	return p, nil
}

// ParseConfig parses a provider config; getenv looks up key variables.
// Unknown fields are errors, each error names the field.
func ParseConfig(b []byte, getenv func(string) string) (*Providers, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("not a valid config: %w", err)
	}
	if len(cfg.Providers) == 0 {
		return nil, errors.New("providers: none configured")
	}
	ps := &Providers{byName: map[string]*provider{}}
	for _, name := range sortedKeys(cfg.Providers) {
		pc := cfg.Providers[name]
		at := "providers." + name
		if !providerName.MatchString(name) {
			return nil, fmt.Errorf("%s: provider names are letters, digits, '_', '-' and '.' (no '/'), at most 64", at)
		}
		u, err := url.Parse(pc.BaseURL)
		switch {
		case pc.BaseURL == "":
			return nil, fmt.Errorf("%s.base_url: required", at)
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			return nil, fmt.Errorf("%s.base_url: %q is not an http(s) URL", at, pc.BaseURL)
		}
		e := Endpoint{BaseURL: pc.BaseURL}
		if pc.Timeout != "" {
			d, err := time.ParseDuration(pc.Timeout)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("%s.timeout: %q is not a positive duration like 120s", at, pc.Timeout)
			}
			e.Timeout = d
		}
		if pc.APIKeyEnv != "" {
			e.APIKey = getenv(pc.APIKeyEnv)
			if e.APIKey == "" {
				return nil, fmt.Errorf("%s.api_key_env: the environment variable %s is not set", at, pc.APIKeyEnv)
			}
		}
		if len(pc.Headers) > 0 {
			e.Header = http.Header{}
			for k, v := range pc.Headers {
				e.Header.Set(k, v)
			}
		}
		up := newAdapter(pc.API, e)
		switch pc.API {
		case gateway.APIChat, gateway.APIResponses, gateway.APIMessages, gateway.APIGemini:
		case "":
			return nil, fmt.Errorf("%s.api: required (chat_completions, responses, messages or gemini)", at)
		default:
			return nil, fmt.Errorf("%s.api: %q is not chat_completions, responses, messages or gemini", at, pc.API)
		}
		for i, m := range pc.Models {
			if m == "" || strings.ContainsAny(m, " \t\n") {
				return nil, fmt.Errorf("%s.models[%d]: %q is not a model name", at, i, m)
			}
		}
		for i, n := range pc.NativeTools {
			if !slices.Contains(nativeFor[pc.API], n) {
				return nil, fmt.Errorf("%s.native_tools[%d]: %q is not a hosted tool of the %s API (it has: %s)", at, i, n, pc.API, strings.Join(nativeFor[pc.API], ", "))
			}
		}
		switch pc.VendorTools {
		case "", "native", "sandbox":
		default:
			return nil, fmt.Errorf("%s.vendor_tools: %q is not native or sandbox", at, pc.VendorTools)
		}
		ps.byName[name] = &provider{name: name, api: pc.API, up: up, endpoint: e, models: pc.Models,
			native: pc.NativeTools, vendorSandbox: pc.VendorTools == "sandbox"}
		ps.names = append(ps.names, name)
	}
	if err := ps.SetAliases(cfg.Aliases); err != nil {
		return nil, err
	}
	return ps, nil
}

// SetAliases checks the config's aliases and resolves each to the
// provider/model it stands for (following aliases of aliases): a target
// no provider serves, a cycle, or an alias that hides a provider's model
// is an error naming the alias. It replaces the aliases set before; call
// it before the providers are in use.
func (ps *Providers) SetAliases(aliases map[string]string) error {
	ps.aliases = map[string]string{}
	for _, name := range sortedKeys(aliases) {
		at := "aliases." + name
		if name == "" || strings.ContainsAny(name, " \t\n") {
			return fmt.Errorf("aliases: %q is not a model name", name)
		}
		if prefix, _, ok := strings.Cut(name, "/"); ok && ps.byName[prefix] != nil {
			return fmt.Errorf("%s: the name is provider %s's model already; an alias needs a name of its own", at, prefix)
		}
		seen := []string{name}
		target := aliases[name]
		for aliases[target] != "" {
			if slices.Contains(seen, target) {
				return fmt.Errorf("%s: the aliases form a cycle (%s -> %s)", at, strings.Join(seen, " -> "), target)
			}
			seen = append(seen, target)
			target = aliases[target]
		}
		prefix, model, ok := strings.Cut(target, "/")
		p := ps.byName[prefix]
		switch {
		case !ok || model == "":
			return fmt.Errorf("%s: target %q is neither an alias nor provider/model", at, target)
		case p == nil:
			return fmt.Errorf("%s: target %q names no configured provider (configured: %s)", at, target, strings.Join(ps.names, ", "))
		case len(p.models) > 0 && !slices.Contains(p.models, model):
			return fmt.Errorf("%s: target %q is not among provider %s's models (%s)", at, target, prefix, strings.Join(p.models, ", "))
		}
		ps.aliases[name] = target
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Providers is the configured providers; it implements gateway.Models.
type Providers struct {
	byName  map[string]*provider
	names   []string          // sorted
	aliases map[string]string // alias → provider/model
}

type provider struct {
	name     string
	api      string
	up       gateway.Upstream
	endpoint Endpoint
	models   []string
	// native and vendorSandbox are gateway.Model's Native and VendorSandbox.
	native        []string
	vendorSandbox bool
}

// newAdapter is the adapter of api over e, nil for an unknown api.
func newAdapter(api string, e Endpoint) gateway.Upstream {
	switch api {
	case gateway.APIChat:
		return NewChat(e)
	case gateway.APIResponses:
		return NewResponses(e)
	case gateway.APIMessages:
		return NewMessages(e)
	case gateway.APIGemini:
		return NewGemini(e)
	}
	return nil
}

// NewProviders builds Providers from adapters directly (tests, embedding):
func NewProviders(entries ...Provider) *Providers {
	ps := &Providers{byName: map[string]*provider{}}
	for _, e := range entries {
		up := e.Upstream
		if up == nil {
			up = newAdapter(e.API, e.Endpoint)
		}
		ps.byName[e.Name] = &provider{name: e.Name, api: e.API, up: up, endpoint: e.Endpoint, models: e.Models,
			native: e.Native, vendorSandbox: e.VendorSandbox}
		ps.names = append(ps.names, e.Name)
	}
	sort.Strings(ps.names)
	return ps
}

// Provider is one entry for NewProviders.
type Provider struct {
	Name     string
	API      string
	Endpoint Endpoint
	Upstream gateway.Upstream // nil: the adapter of API over Endpoint
	Models   []string
	// Native and VendorSandbox are as ProviderConfig's NativeTools and
	// VendorTools "sandbox".
	Native        []string
	VendorSandbox bool
}

// Resolve implements gateway.Models.
func (ps *Providers) Resolve(name string) (gateway.Model, error) {
	if target, ok := ps.aliases[name]; ok {
		name = target
	}
	prefix, model, ok := strings.Cut(name, "/")
	if !ok || prefix == "" || model == "" {
		return gateway.Model{}, gateway.BadRequest("model", "model %q: want provider/model, e.g. %s/some-model (configured providers: %s)%s",
			name, ps.example(), strings.Join(ps.names, ", "), ps.aliasList())
	}
	p := ps.byName[prefix]
	if p == nil {
		return gateway.Model{}, &gateway.RequestError{Status: http.StatusNotFound, Param: "model",
			Message: fmt.Sprintf("model %q: no provider %q is configured (configured providers: %s)", name, prefix, strings.Join(ps.names, ", "))}
	}
	return gateway.Model{Provider: prefix, Name: model, API: p.api, Upstream: p.up, Native: p.native, VendorSandbox: p.vendorSandbox}, nil
}

func (ps *Providers) example() string {
	if len(ps.names) > 0 {
		return ps.names[0]
	}
	return "provider"
}

// aliasList is ", or an alias: a, b" when aliases are configured.
func (ps *Providers) aliasList() string {
	if len(ps.aliases) == 0 {
		return ""
	}
	return ", or an alias: " + strings.Join(sortedKeys(ps.aliases), ", ")
}

// List implements gateway.Models: "provider/model" for every model the
// config lists, and every alias, sorted.
func (ps *Providers) List() []string {
	out := sortedKeys(ps.aliases)
	for _, n := range ps.names {
		for _, m := range ps.byName[n].models {
			out = append(out, n+"/"+m)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Names are the configured provider names, sorted.
func (ps *Providers) Names() []string { return append([]string(nil), ps.names...) }

// Endpoint returns the endpoint of provider name (for the Chat
// Completions pass-through, which forwards bodies as they are).
func (ps *Providers) Endpoint(name string) (Endpoint, string, bool) {
	p := ps.byName[name]
	if p == nil {
		return Endpoint{}, "", false
	}
	return p.endpoint, p.api, true
}

// EveryAPI returns providers named after the four API flavours —
// "chat_completions", "responses", "messages" and "gemini" — all at one
// server that speaks them all (the scripted upstream,
// internal/gateway/scripted), so a test can run one request on each
// flavour: model "messages/m1" is m1 over the Messages API. base is the
// server's root URL (no /v1).
func EveryAPI(base string, timeout time.Duration) *Providers {
	var ps []Provider
	for _, api := range []string{gateway.APIChat, gateway.APIResponses, gateway.APIMessages, gateway.APIGemini} {
		version := "/v1"
		if api == gateway.APIGemini {
			version = "/v1beta"
		}
		ps = append(ps, Provider{Name: api, API: api, Endpoint: Endpoint{BaseURL: strings.TrimRight(base, "/") + version, APIKey: "sk-scripted", Timeout: timeout}})
	}
	return NewProviders(ps...)
}
