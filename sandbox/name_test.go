package sandbox

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestValidName: ValidName accepts exactly what ^[A-Za-z0-9_-]{1,40}$
// matches.
func TestValidName(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)
	names := []string{"", "a", "A-b_9", strings.Repeat("x", 40), strings.Repeat("x", 41), "a b", "a/b", "..", "é", "a\x00", "a\n", "Z", "-", "_"}
	r := rand.New(rand.NewPCG(3, 4))
	const alphabet = "aZ09_-./ \x00\xff\n"
	for range 5000 {
		b := make([]byte, r.IntN(44))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		names = append(names, string(b))
	}
	for c := range 256 {
		names = append(names, string([]byte{byte(c)}))
	}
	for _, n := range names {
		if got, want := ValidName(n), re.MatchString(n); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", n, got, want)
		}
	}
}
