package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

type keys struct{ s *DB }

func (k keys) Create(ctx context.Context, scope store.Scope) (store.Key, string, error) {
	if err := scope.Validate(); err != nil {
		return store.Key{}, "", err
	}
	now := store.Truncate(time.Now())
	// Key ids have 64 random bits; a collision is retried, not reported.
	for range 3 {
		id, token, hash := store.MintKey()
		_, err := k.s.exec(ctx, `INSERT INTO api_keys (id, account, workspace, secret_sha256, created_at_ms, revoked_at_ms) VALUES ($1, $2, $3, $4, $5, 0)`,
			id, scope.Account, scope.Workspace, hash, store.Millis(now))
		if k.s.dialect.isUnique(err) {
			continue
		}
		if err != nil {
			return store.Key{}, "", fmt.Errorf("creating key: %w", err)
		}
		return store.Key{ID: id, Account: scope.Account, Workspace: scope.Workspace, CreatedAt: now}, token, nil
	}
	return store.Key{}, "", fmt.Errorf("creating key: three id collisions in a row")
}

func (k keys) List(ctx context.Context) ([]store.Key, error) {
	var out []store.Key
	err := k.s.query(ctx, `SELECT id, account, workspace, created_at_ms, revoked_at_ms FROM api_keys ORDER BY created_at_ms, id`, nil, func(r *sql.Rows) error {
		var key store.Key
		var created, revoked int64
		if err := r.Scan(&key.ID, &key.Account, &key.Workspace, &created, &revoked); err != nil {
			return err
		}
		key.CreatedAt, key.RevokedAt = store.FromMillis(created), store.FromMillis(revoked)
		out = append(out, key)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	return out, nil
}

func (k keys) Revoke(ctx context.Context, id string) error {
	n, err := k.s.exec(ctx, `UPDATE api_keys SET revoked_at_ms = $2 WHERE id = $1 AND revoked_at_ms = 0`, id, time.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("revoking key %s: %w", id, err)
	}
	if n == 1 {
		return nil
	}
	var revoked int64
	if err := k.s.queryRow(ctx, `SELECT revoked_at_ms FROM api_keys WHERE id = $1`, []any{id}, &revoked); err != nil {
		return notFound(err, "key", id)
	}
	return nil // revoked before
}

func (k keys) Authenticate(ctx context.Context, token string) (store.Key, error) {
	id, hash, ok := store.ParseToken(token)
	if !ok {
		return store.Key{}, store.ErrUnauthorized
	}
	var key store.Key
	var stored string
	var created, revoked int64
	err := k.s.queryRow(ctx, `SELECT id, account, workspace, secret_sha256, created_at_ms, revoked_at_ms FROM api_keys WHERE id = $1`, []any{id},
		&key.ID, &key.Account, &key.Workspace, &stored, &created, &revoked)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Key{}, store.ErrUnauthorized
	}
	if err != nil {
		return store.Key{}, fmt.Errorf("authenticating key %s: %w", id, err)
	}
	if !store.HashesEqual(stored, hash) || revoked != 0 {
		return store.Key{}, store.ErrUnauthorized
	}
	key.CreatedAt = store.FromMillis(created)
	return key, nil
}
