package image

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// aptSource is one "deb" entry of the host's apt configuration.
type aptSource struct {
	URI        string
	Suite      string
	Components []string
}

// readAptSources reads the deb (not deb-src) entries of the apt
// configuration under etcApt (normally /etc/apt): sources.list and
// sources.list.d/*.list in one-line format, sources.list.d/*.sources in
// deb822 format. Disabled stanzas and files with other suffixes are skipped.
func readAptSources(etcApt string) ([]aptSource, error) {
	var out []aptSource
	if b, err := os.ReadFile(filepath.Join(etcApt, "sources.list")); err == nil {
		out = append(out, parseOneLine(string(b))...)
	}
	ents, _ := os.ReadDir(filepath.Join(etcApt, "sources.list.d"))
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(etcApt, "sources.list.d", n)
		switch {
		case strings.HasSuffix(n, ".list"):
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			out = append(out, parseOneLine(string(b))...)
		case strings.HasSuffix(n, ".sources"):
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			out = append(out, parseDeb822(string(b))...)
		}
	}
	return out, nil
}

func parseOneLine(text string) []aptSource {
	var out []aptSource
	for _, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") { // options: [arch=amd64 signed-by=...]
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) == 0 {
				continue
			}
			f = f[1:]
		}
		if len(f) < 2 {
			continue
		}
		out = append(out, aptSource{URI: f[0], Suite: f[1], Components: f[2:]})
	}
	return out
}

func parseDeb822(text string) []aptSource {
	var out []aptSource
	sc := bufio.NewScanner(strings.NewReader(text + "\n\n"))
	fields := map[string]string{}
	last := ""
	flush := func() {
		defer func() { fields = map[string]string{}; last = "" }()
		if strings.EqualFold(fields["enabled"], "no") || !hasWord(fields["types"], "deb") {
			return
		}
		for _, uri := range strings.Fields(fields["uris"]) {
			for _, suite := range strings.Fields(fields["suites"]) {
				out = append(out, aptSource{URI: uri, Suite: suite, Components: strings.Fields(fields["components"])})
			}
		}
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "#"):
		case strings.TrimSpace(line) == "":
			if len(fields) > 0 {
				flush()
			}
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				fields[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
	}
	return out
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// debianSources picks, from the host's entries, the mirror that serves suite
// and the entries to give the image's apt (suite, suite-updates and
// suite-security, main component only).
func debianSources(all []aptSource, suite string) (mirror string, list []aptSource, err error) {
	seen := map[string]bool{}
	for _, s := range all {
		if !strings.HasPrefix(s.URI, "http://") && !strings.HasPrefix(s.URI, "https://") && !strings.HasPrefix(s.URI, "file:/") {
			continue
		}
		if s.Suite != suite && s.Suite != suite+"-updates" && s.Suite != suite+"-security" && s.Suite != suite+"/updates" {
			continue
		}
		if len(s.Components) > 0 && !hasWord(strings.Join(s.Components, " "), "main") {
			continue
		}
		if s.Suite == suite && mirror == "" {
			mirror = s.URI
		}
		k := s.URI + " " + s.Suite
		if !seen[k] {
			seen[k] = true
			list = append(list, aptSource{URI: s.URI, Suite: s.Suite, Components: []string{"main"}})
		}
	}
	if mirror == "" {
		return "", nil, fmt.Errorf("no apt source for Debian %q (component main) in the host's apt configuration (/etc/apt/sources.list, /etc/apt/sources.list.d); add one or pass a mirror", suite)
	}
	return mirror, list, nil
}
