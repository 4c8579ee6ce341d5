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
