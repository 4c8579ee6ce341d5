package store

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// TokenPrefix starts every API key token, so a leaked key is recognisable
// (secret scanners, logs) as a Shellgate key.
const TokenPrefix = "sgk_"

// A token is TokenPrefix, the key id's 16 hex digits, '_', and the secret:
// 32 random bytes in unpadded base64url (43 characters), e.g.
//
//	sgk_0f3a9c1b2d4e5f60_Jx2...43 characters...
//
// Only SHA-256 of the secret is stored. A fast hash is the right one here:
// slow password hashes (bcrypt, argon2) exist because human passwords are
// guessable, but a 256-bit secret from crypto/rand cannot be found by
// guessing at any hash speed, and SHA-256 is preimage resistant, so the
// stored hash gives nothing away while checking a key on every request
// stays cheap. The id in the token finds the row; the comparison of hashes
// is constant-time.
const (
	keyIDHexLen  = 16
	secretBytes  = 32
	secretB64Len = 43
	tokenLen     = len(TokenPrefix) + keyIDHexLen + 1 + secretB64Len
)

// MintKey makes a new key: its id ("key_" + 16 hex digits), its token,
// and the hash to store (SecretHash). Implementations of Keys call it.
func MintKey() (id, token, hash string) {
	var idb [keyIDHexLen / 2]byte
	var secret [secretBytes]byte
	rand.Read(idb[:])
	rand.Read(secret[:])
	idHex := hex.EncodeToString(idb[:])
	token = TokenPrefix + idHex + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	sum := sha256.Sum256(secret[:])
	return "key_" + idHex, token, hex.EncodeToString(sum[:])
}

// ParseToken returns the key id a token names and the hash of its secret;
// ok is false when the token is not shaped like one MintKey makes.
func ParseToken(token string) (id, hash string, ok bool) {
	if len(token) != tokenLen || !strings.HasPrefix(token, TokenPrefix) {
		return "", "", false
	}
	rest := token[len(TokenPrefix):]
	idHex, secretText := rest[:keyIDHexLen], rest[keyIDHexLen+1:]
	if rest[keyIDHexLen] != '_' {
		return "", "", false
	}
	if _, err := hex.DecodeString(idHex); err != nil || strings.ToLower(idHex) != idHex {
		return "", "", false
	}
	secret, err := base64.RawURLEncoding.Strict().DecodeString(secretText)
	if err != nil || len(secret) != secretBytes {
		return "", "", false
	}
	sum := sha256.Sum256(secret)
	return "key_" + idHex, hex.EncodeToString(sum[:]), true
}

// HashesEqual compares two stored-form hashes in constant time.
func HashesEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
