package store

import (
	"strings"
	"testing"
)

func TestMintAndParse(t *testing.T) {
	id, token, hash := MintKey()
	if len(token) != tokenLen || !strings.HasPrefix(token, TokenPrefix) || !strings.HasPrefix(id, "key_") || len(hash) != 64 {
		t.Fatalf("MintKey = %q, %q, %q", id, token, hash)
	}
	gotID, gotHash, ok := ParseToken(token)
	if !ok || gotID != id || !HashesEqual(gotHash, hash) {
		t.Fatalf("ParseToken = %q, %q, %v", gotID, gotHash, ok)
	}
	id2, token2, hash2 := MintKey()
	if id2 == id || token2 == token || hash2 == hash {
		t.Fatal("two keys are the same")
	}
	if HashesEqual(hash, hash2) || HashesEqual(hash, hash[:63]) {
		t.Fatal("HashesEqual of different hashes")
	}
	prefix := len(TokenPrefix) + keyIDHexLen
	for name, bad := range map[string]string{
		"empty":                "",
		"no prefix":            token[len(TokenPrefix):],
		"separator replaced":   token[:prefix] + "-" + token[prefix+1:],
		"id not hex":           TokenPrefix + "zzzzzzzzzzzzzzzz" + token[prefix:],
		"id upper-case hex":    TokenPrefix + "ABCDEF0123456789" + token[prefix:],
		"secret not base64url": token[:len(token)-1] + "+",
		"secret non-canonical": token[:len(token)-1] + "B", // 43rd char carries 2 unused bits
		"padded":               token + "=",
	} {
		if _, _, ok := ParseToken(bad); ok {
			t.Errorf("%s: ParseToken(%q) accepted", name, bad)
		}
	}
}
