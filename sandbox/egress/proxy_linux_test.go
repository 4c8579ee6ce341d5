package egress

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
)

func TestParseSNI(t *testing.T) {
	// Hostile bodies never panic and never yield a name.
	for _, b := range [][]byte{nil, make([]byte, 34), append(make([]byte, 34), 0xff), append(make([]byte, 35), 0xff, 0xff)} {
		if name, _ := parseSNI(b); name != "" {
			t.Fatalf("%x: %q", b, name)
		}
	}
	// The ClientHello crypto/tls sends yields its ServerName, and none
	// without one; a name the proxy could be fooled by is refused.
	for _, tc := range []struct{ server, want, err string }{
		{server: "api.example.test", want: "api.example.test"},
		{server: "", want: ""},
		{server: "a b.test", err: "malformed"},
	} {
		name, err := parseSNI(clientHello(t, tc.server))
		if name != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("server %q: got %q, %v; want %q, error %q", tc.server, name, err, tc.want, tc.err)
		}
	}
}

// clientHello is the body of the first handshake message crypto/tls sends
// for server (its record and handshake headers cut off).
func clientHello(t *testing.T, server string) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		cfg := &tls.Config{ServerName: server, InsecureSkipVerify: server == ""}
		tls.Client(c, cfg).Handshake()
		c.Close()
	}()
	rec := make([]byte, 5)
	if _, err := io.ReadFull(s, rec); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(rec[3])<<8|int(rec[4]))
	if _, err := io.ReadFull(s, body); err != nil {
		t.Fatal(err)
	}
	if body[0] != 1 {
		t.Fatalf("not a ClientHello: %x", body[:4])
	}
	return body[4:]
}

func FuzzParseSNI(f *testing.F) {
	f.Add(make([]byte, 40))
	f.Fuzz(func(t *testing.T, b []byte) { parseSNI(b) })
}

func FuzzParseHTTPHead(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.com\r\n"))
	f.Add([]byte("CONNECT a.com:443 HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) { parseHTTPHead(b) })
}

// TestOneRequest: an absolute-form head leaves in origin-form, with
// Connection: close and without the proxy's headers (folded lines of a
// dropped header included); the bytes after the head are kept.
func TestOneRequest(t *testing.T) {
	in := "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic x\r\n y\r\nX-A: 1\r\n 2\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\n\r\nBODY"
	want := "GET / HTTP/1.1\r\nHost: a.test\r\nX-A: 1\r\n 2\r\nConnection: close\r\n\r\nBODY"
	if got := string(oneRequest([]byte(in))); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for in, want := range map[string]string{
		"GET http://a.test:8080/p/q?x=1 HTTP/1.1": "GET /p/q?x=1 HTTP/1.1",
		"POST HTTP://a.test?x HTTP/1.0":           "POST /?x HTTP/1.0",
		"GET http://a.test HTTP/1.1":              "GET / HTTP/1.1",
		"GET /already HTTP/1.1":                   "GET /already HTTP/1.1",
		"GET http:/ HTTP/1.1":                     "GET http:/ HTTP/1.1",
	} {
		if got := string(originForm([]byte(in))); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}
