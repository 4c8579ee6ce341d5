package homearchive

// Reading and signing manifests, for both kinds of archived home: this
// package's images and kubehome's file trees each keep a JSON manifest per
// home in storage others may write to, read back as hostile input.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
)

// ReadManifest reads the untrusted manifest of name from r into m (a
// pointer to a struct): at most limit bytes holding one JSON object with
// no unknown fields, else an error matching corrupt (the caller's
// ErrCorrupt).
func ReadManifest(r io.Reader, name string, limit int64, m any, corrupt error) error {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return fmt.Errorf("manifest of %s: %w", name, err)
	}
	if int64(len(b)) > limit {
		return fmt.Errorf("%w: manifest of %s is larger than %d bytes", corrupt, name, limit)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		return fmt.Errorf("%w: manifest of %s: %v", corrupt, name, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: manifest of %s: data after the manifest", corrupt, name)
	}
	return nil
}

// Sign is the hex HMAC-SHA256 under key of a manifest's JSON; unsigned is
// the manifest with its own signature field empty.
func Sign(key []byte, unsigned any) (string, error) {
	b, err := json.Marshal(unsigned)
	if err != nil {
		return "", err
	}
	h := hmac.New(sha256.New, key)
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// CheckSignature, with key set, refuses the manifest of name unless sig is
// Sign(key, unsigned), with an error matching corrupt.
func CheckSignature(key []byte, unsigned any, sig, name string, corrupt error) error {
	if key == nil {
		return nil
	}
	want, err := Sign(key, unsigned)
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return fmt.Errorf("%w: manifest of %s: missing or bad signature (written without this archive key?)", corrupt, name)
	}
	return nil
}
