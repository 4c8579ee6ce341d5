package jsrun

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"
)

// ContinuationCodec turns the continuation the runner signed into the token
// a caller holds, and back. The runner always signs first and verifies
// after decoding, so a codec cannot weaken integrity, scope binding, expiry
// or single use: it only decides what leaves the process. Uses:
//
//   - confidentiality: encrypt the signed token (NewEncryptedCodec), since
//     a signed token is readable by whoever holds it (host-call arguments
//     and results are in its ledger);
//   - server-side storage: keep the signed token in a database and hand out
//     only a reference to it (see the store codec in codec_test.go).
//
// Config.Codec nil is the default: the token is the signed continuation
// itself, unchanged.
//
// Encode is called once an interrupted run has its continuation. Decode is
// called at the start of a resume, before anything else; it returns the
// signed continuation it was given by Encode (or an error: an unknown or
// malformed token is a *Error with CodeProtocol, any other error becomes
// one). A codec should not delete what it stored on Decode: a resume that
// fails before any host function ran gives its continuation back and may
// be retried (each continuation still resumes at most once, through
// Config.Store); expire entries at SealedContinuation.ExpiresAt instead.
// Both must be safe for concurrent use.
type ContinuationCodec interface {
	Encode(ctx context.Context, c SealedContinuation) (token string, err error)
	Decode(ctx context.Context, token string) (signed string, err error)
}

// SealedContinuation is a continuation as the runner signed it.
type SealedContinuation struct {
	// Signed is the signed token (base64url envelope "." base64url MAC):
	// what callers get without a codec.
	Signed string
	// ID is unique to this continuation (the random nonce the single-use
	// store claims): a key a storing codec may use.
	ID string
	// ExpiresAt is when Signed stops verifying (ClockSkew later, to be
	// exact): a storing codec may forget it from then on.
	ExpiresAt time.Time
}

// encodeToken runs the codec on a freshly signed continuation.
func (r *Runner) encodeToken(ctx context.Context, sc SealedContinuation) (string, error) {
	if r.cfg.Codec == nil {
		return sc.Signed, nil
	}
	tok, err := r.cfg.Codec.Encode(ctx, sc)
	if err == nil && tok == "" {
		err = errors.New("empty token")
	}
	if err != nil {
		return "", codecError(ctx, "encoding", err)
	}
	return tok, nil
}

// decodeToken turns a caller's token back into the signed continuation.
func (r *Runner) decodeToken(ctx context.Context, tok string, maxBytes int) (string, error) {
	if len(tok) > maxBytes {
		return "", protocolError("%d bytes, over the limit of %d", len(tok), maxBytes)
	}
	if r.cfg.Codec == nil {
		return tok, nil
	}
	signed, err := r.cfg.Codec.Decode(ctx, tok)
	if err != nil {
		return "", codecError(ctx, "decoding", err)
	}
	return signed, nil
}

func codecError(ctx context.Context, op string, err error) error {
	var je *Error
	switch {
	case errors.As(err, &je):
		return err
	case ctx.Err() != nil:
		return &Error{Code: CodeAborted, Name: "RunError", Message: "run aborted by the caller", cause: err}
	case op == "decoding":
		return &Error{Code: CodeProtocol, Name: "RunError", Message: "invalid continuation: " + err.Error(), cause: err}
	}
	return &Error{Code: CodeInternal, Name: "RunError", Message: "continuation codec " + op + ": " + err.Error(), cause: err}
}

// encryptedCodec seals signed continuations with AES-256-GCM.
type encryptedCodec struct {
	aead cipher.AEAD
}

// encryptedDomain is the associated data of every encrypted token, so that
// ciphertext made with the same key for another purpose does not decrypt.
const encryptedDomain = "jsrun.continuation.encrypted.v1"

// NewEncryptedCodec returns a codec that encrypts continuations with
// AES-256-GCM under key (32 bytes): the token is base64url(nonce ‖
// ciphertext), unreadable without the key. Integrity and expiry are still
// checked by the runner on the signed continuation inside. Rotate keys by
// wrapping two codecs; a token made under a key that is gone fails with
// RUN_PROTOCOL_ERROR.
func NewEncryptedCodec(key []byte) (ContinuationCodec, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("jsrun: an encryption key must be 32 bytes, got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &encryptedCodec{aead: aead}, nil
}

func (c *encryptedCodec) Encode(_ context.Context, sc SealedContinuation) (string, error) {
	nonce := make([]byte, c.aead.NonceSize(), c.aead.NonceSize()+len(sc.Signed)+c.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(c.aead.Seal(nonce, nonce, []byte(sc.Signed), []byte(encryptedDomain))), nil
}

func (c *encryptedCodec) Decode(_ context.Context, tok string) (string, error) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(tok)
	if err != nil || len(raw) < c.aead.NonceSize()+c.aead.Overhead() {
		return "", protocolError("malformed encrypted token")
	}
	n := c.aead.NonceSize()
	plain, err := c.aead.Open(nil, raw[:n], raw[n:], []byte(encryptedDomain))
	if err != nil {
		return "", protocolError("encrypted token does not decrypt")
	}
	return string(plain), nil
}
