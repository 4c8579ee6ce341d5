package egress

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	many := make([]string, 51)
	for i := range many {
		many[i] = fmt.Sprintf("h%d.example.com", i)
	}
	for _, c := range []struct {
		name   string
		p      Policy
		errHas string // "" = valid
	}{
		{"01 disabled", Policy{Type: Disabled}, ""},
		{"02 allowlist", Policy{Type: Allowlist, AllowedDomains: []string{"pypi.org", "*.pythonhosted.org", "Example.COM."}}, ""},
		{"03 star", Policy{Type: Allowlist, AllowedDomains: []string{"*"}}, ""},
		{"04 50 entries", Policy{Type: Allowlist, AllowedDomains: many[:50]}, ""},
		{"05 51 entries", Policy{Type: Allowlist, AllowedDomains: many}, "51 entries"},
		{"06 empty list", Policy{Type: Allowlist}, "at least one"},
		{"07 empty name", Policy{Type: Allowlist, AllowedDomains: []string{"a.com", ""}}, `entry ""`},
		{"08 IPv4", Policy{Type: Allowlist, AllowedDomains: []string{"10.0.0.1"}}, `"10.0.0.1": IP addresses`},
		{"09 IPv6", Policy{Type: Allowlist, AllowedDomains: []string{"[fd00:ec2::254]"}}, "IP addresses"},
		{"10 IPv6 bare", Policy{Type: Allowlist, AllowedDomains: []string{"::1"}}, "IP addresses"},
		{"11 port", Policy{Type: Allowlist, AllowedDomains: []string{"example.com:8080"}}, "ports are not allowed"},
		{"12 URL", Policy{Type: Allowlist, AllowedDomains: []string{"https://example.com"}}, "not a URL"},
		{"13 mid glob", Policy{Type: Allowlist, AllowedDomains: []string{"a.*.com"}}, "first label"},
		{"14 glob of a TLD", Policy{Type: Allowlist, AllowedDomains: []string{"*.com"}}, "two labels"},
		{"15 partial glob", Policy{Type: Allowlist, AllowedDomains: []string{"*example.com"}}, "first label"},
		{"16 bad chars", Policy{Type: Allowlist, AllowedDomains: []string{"exa mple.com"}}, "not a valid hostname"},
		{"17 digits only", Policy{Type: Allowlist, AllowedDomains: []string{"0x7f.1"}}, ""},
		{"18 dotted decimal", Policy{Type: Allowlist, AllowedDomains: []string{"127.1"}}, "not a valid hostname"},
		{"19 unknown type", Policy{Type: "open"}, "unknown type"},
		{"20 no type", Policy{}, "type is required"},
		{"21 disabled with domains", Policy{Type: Disabled, AllowedDomains: []string{"a.com"}}, "only for type"},
		{"22 long label", Policy{Type: Allowlist, AllowedDomains: []string{strings.Repeat("a", 64) + ".com"}}, "not a valid hostname"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.Validate()
			if c.errHas == "" {
				if err != nil {
					t.Fatalf("want valid: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.errHas) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v, want one containing %q", err, c.errHas)
			}
		})
	}
}

func TestParsePolicy(t *testing.T) {
	for _, c := range []struct{ in, errHas string }{
		{`{"type":"allowlist","allowed_domains":["a.com"]}`, ""},
		{`{"type":"disabled"}`, ""},
		{`{"type":"allowlist","allowed_domains":"a.com"}`, "cannot unmarshal"},
		{`{"type":"allowlist","allowed_domains":["a.com"],"ports":[22]}`, "unknown field"},
		{`{"type":"allowlist"`, "unexpected EOF"},
		{`{"type":"disabled"} {}`, "trailing"},
		{`null`, "type is required"},
	} {
		_, err := ParsePolicy([]byte(c.in))
		if c.errHas == "" && err != nil || c.errHas != "" && (err == nil || !strings.Contains(err.Error(), c.errHas)) {
			t.Errorf("%s: %v, want %q", c.in, err, c.errHas)
		}
	}
}

func TestAllows(t *testing.T) {
	p := &Policy{Type: Allowlist, AllowedDomains: []string{"pypi.org", "*.pythonhosted.org", "Example.COM."}}
	for _, c := range []struct {
		host string
		ok   bool
	}{
		{"pypi.org", true},
		{"PYPI.ORG.", true},
		{"www.pypi.org", false}, // exact, not a glob
		{"files.pythonhosted.org", true},
		{"a.b.pythonhosted.org", true},
		{"pythonhosted.org", false}, // the apex is not under the glob
		{"evilpythonhosted.org", false},
		{"example.com", true},
		{"example.com.evil.org", false},
		{"10.0.0.1", false},
		{"", false},
		{"pypi.org:443", false},
	} {
		if got := p.Allows(c.host); got != c.ok {
			t.Errorf("Allows(%q) = %v, want %v", c.host, got, c.ok)
		}
	}
	star := &Policy{Type: Allowlist, AllowedDomains: []string{"*"}}
	if !star.Allows("anything.example") || star.Allows("169.254.169.254") || star.Allows("[::1]") {
		t.Error("* must allow every hostname and no IP literal")
	}
	var none *Policy
	if none.Allows("a.com") || (&Policy{Type: Disabled}).Allows("a.com") {
		t.Error("disabled allows nothing")
	}
}

func TestNarrow(t *testing.T) {
	max := &Policy{Type: Allowlist, AllowedDomains: []string{"pypi.org", "*.example.com"}}
	al := func(d ...string) *Policy { return &Policy{Type: Allowlist, AllowedDomains: d} }
	for _, c := range []struct {
		name   string
		req    *Policy
		max    *Policy
		errHas string
	}{
		{"01 nil is disabled", nil, max, ""},
		{"02 subset", al("pypi.org"), max, ""},
		{"03 host under a glob", al("a.example.com", "PYPI.org."), max, ""},
		{"04 narrower glob", al("*.a.example.com"), max, ""},
		{"05 same glob", al("*.example.com"), max, ""},
		{"06 apex of a glob", al("example.com"), max, `"example.com"`},
		{"07 outside", al("evil.com"), max, `"evil.com"`},
		{"08 star within a list", al("*"), max, `"*"`},
		{"09 anything within star", al("*", "a.b"), al("*"), ""},
		{"10 workspace without network", al("pypi.org"), nil, `"pypi.org"`},
		{"11 invalid request", al("10.0.0.1"), max, "IP addresses"},
		{"12 disabled request, no max", &Policy{Type: Disabled}, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Narrow(c.req, c.max)
			if c.errHas == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.req.Enabled() != got.Enabled() {
					t.Fatalf("got %+v", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.errHas) {
				t.Fatalf("%v, want an error naming %s", err, c.errHas)
			}
		})
	}
}

func TestEqual(t *testing.T) {
	a := &Policy{Type: Allowlist, AllowedDomains: []string{"a.com", "B.com."}}
	b := &Policy{Type: Allowlist, AllowedDomains: []string{"b.com", "a.com"}}
	if !Equal(a, b) || Equal(a, &Policy{Type: Allowlist, AllowedDomains: []string{"a.com"}}) || !Equal(nil, &Policy{Type: Disabled}) || Equal(nil, a) {
		t.Fatal("Equal")
	}
}
