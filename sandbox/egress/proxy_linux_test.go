package egress

import "testing"

func TestParseSNI(t *testing.T) {
	// Hostile bodies never panic and never yield a name.
	for _, b := range [][]byte{nil, make([]byte, 34), append(make([]byte, 34), 0xff), append(make([]byte, 35), 0xff, 0xff)} {
		if name, _ := parseSNI(b); name != "" {
			t.Fatalf("%x: %q", b, name)
		}
	}
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
