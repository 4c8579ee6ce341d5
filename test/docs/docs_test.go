// Package docs checks the user documentation against the repository: every
// relative link in README.md and docs/*.md reaches a file (and its #anchor a
// heading of that file), and every route of the OpenAPI document is named on
// some page. It reads files only: no root, no runtimes, well under a second.
package docs

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, from this package's directory.
const root = "../.."

// pages returns README.md and docs/*.md, relative to root.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rel)
	}
	if len(out) < 10 {
		t.Fatalf("found only %v: is the test running from test/docs?", out)
	}
	return out
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// prose is the Markdown outside fenced code blocks, line by line (code
// lines are blanked so line numbers stay true), with inline code spans
// blanked too: a link or heading inside code is not one.
func prose(md string) []string {
	lines := strings.Split(md, "\n")
	fence := ""
	for i, l := range lines {
		trim := strings.TrimLeft(l, " ")
		if fence != "" {
			if strings.HasPrefix(trim, fence) {
				fence = ""
			}
			lines[i] = ""
			continue
		}
		if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
			fence = trim[:3]
			lines[i] = ""
			continue
		}
		lines[i] = codeSpan.ReplaceAllString(l, "``")
	}
	return lines
}

var (
	codeSpan = regexp.MustCompile("`[^`]*`")
	heading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	link     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	mdLink   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// slug is GitHub's anchor for a heading: lower case, markup and punctuation
// dropped (letters, digits, '-' and '_' kept), spaces as '-'.
func slug(h string) string {
	h = mdLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors returns the heading anchors of a Markdown file, with GitHub's
// -1, -2 suffixes for repeated headings.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	// Headings are read with their code spans: GitHub keeps the text inside
	// backticks in the anchor.
	lines := strings.Split(md, "\n")
	blank := prose(md)
	for i, l := range lines {
		if blank[i] == "" && l != "" {
			continue // inside a fenced block
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func TestSlug(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"Guardrails: prompt injection", "guardrails-prompt-injection"},
		{"The HTTP API (`shellgate serve`)", "the-http-api-shellgate-serve"},
		{"OpenAI's containers API", "openais-containers-api"},
		{"Kubernetes sandboxes (in progress)", "kubernetes-sandboxes-in-progress"},
		{"CLI: `shellgate eval`", "cli-shellgate-eval"},
		{"No model API at hand?", "no-model-api-at-hand"},
	} {
		if got := slug(c.in); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestLinks: every relative link on a page names a file of the repository,
// and its #fragment (if any) a heading of the Markdown file it names.
func TestLinks(t *testing.T) {
	cache := map[string]map[string]bool{}
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := cache[rel]; ok {
			return a
		}
		a := anchors(read(t, rel))
		cache[rel] = a
		return a
	}
	checked := 0
	for _, page := range pages(t) {
		for n, l := range prose(read(t, page)) {
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				target := m[1]
				u, err := url.Parse(target)
				if err != nil {
					t.Errorf("%s:%d: link %q: %v", page, n+1, target, err)
					continue
				}
				if u.Scheme != "" || u.Host != "" {
					continue // http(s), mailto: not ours to check
				}
				checked++
				file := page
				if u.Path != "" {
					file = filepath.Join(filepath.Dir(page), u.Path)
					st, err := os.Stat(filepath.Join(root, file))
					if err != nil {
						t.Errorf("%s:%d: link %q: no such file %s", page, n+1, target, file)
						continue
					}
					if st.IsDir() || !strings.HasSuffix(file, ".md") {
						if u.Fragment != "" {
							t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", page, n+1, target)
						}
						continue
					}
				}
				if u.Fragment != "" && !anchorsOf(file)[u.Fragment] {
					t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", page, n+1, target, file, u.Fragment)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the link pattern is broken")
	}
}

// TestRoutesDocumented: every path of internal/server/openapi.json appears
// on some page, verbatim except for the names of its {parameters}, and not
// as the prefix of a longer path (/v1/files is not named by /api/v1/files,
// nor /api/v1/containers by /api/v1/containers/{id}).
func TestRoutesDocumented(t *testing.T) {
	var doc struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal([]byte(read(t, "internal/server/openapi.json")), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Paths) == 0 {
		t.Fatal("openapi.json has no paths")
	}
	var all strings.Builder
	for _, page := range pages(t) {
		all.WriteString(read(t, page))
		all.WriteByte('\n')
	}
	text := all.String()
	param := regexp.MustCompile(`\\\{[^}]*\\\}`)
	var missing []string
	for p := range doc.Paths {
		pat := param.ReplaceAllString(regexp.QuoteMeta(p), `\{[^}/]+\}`)
		re := regexp.MustCompile(`(?:^|[^A-Za-z0-9_/.{}-])` + pat + `(?:$|[^A-Za-z0-9_/{}-])`)
		if !re.MatchString(text) {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	for _, p := range missing {
		t.Errorf("route %s is in the OpenAPI document but on no page (README.md, docs/*.md)", p)
	}
}
