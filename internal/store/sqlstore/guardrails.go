package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

type guardrails struct{ s *DB }

func (g guardrails) Get(ctx context.Context, scope store.Scope) (string, error) {
	if err := scope.Validate(); err != nil {
		return "", err
	}
	var config string
	err := g.s.queryRow(ctx, `SELECT config FROM guardrails WHERE account = $1 AND workspace = $2`, []any{scope.Account, scope.Workspace}, &config)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("guardrails of %s/%s: %w", scope.Account, scope.Workspace, err)
	}
	return config, nil
}

func (g guardrails) Put(ctx context.Context, scope store.Scope, config string) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	_, err := g.s.exec(ctx, `INSERT INTO guardrails (account, workspace, config, updated_at_ms) VALUES ($1, $2, $3, $4)
		ON CONFLICT (account, workspace) DO UPDATE SET config = excluded.config, updated_at_ms = excluded.updated_at_ms`,
		scope.Account, scope.Workspace, config, store.Millis(time.Now()))
	if err != nil {
		return fmt.Errorf("storing the guardrails of %s/%s: %w", scope.Account, scope.Workspace, err)
	}
	return nil
}

func (g guardrails) Record(ctx context.Context, scope store.Scope, ds []store.Detection) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	for i, d := range ds {
		if d.At.IsZero() {
			d.At = time.Now()
		}
		_, err := g.s.exec(ctx, `INSERT INTO guard_detections (account, workspace, request_id, seq, at_ms, api, action, guardrail, rule, technique, via, location, start_byte, end_byte, excerpt, detector)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) ON CONFLICT (account, workspace, request_id, seq) DO NOTHING`,
			scope.Account, scope.Workspace, d.RequestID, i, store.Millis(d.At), d.API, d.Action, d.Guardrail, d.Rule, d.Technique, d.Via,
			d.Location, d.Start, d.End, d.Excerpt, d.Detector)
		if err != nil {
			return fmt.Errorf("recording detections of request %s: %w", d.RequestID, err)
		}
	}
	return nil
}

func (g guardrails) Detections(ctx context.Context, scope store.Scope, requestID string) ([]store.Detection, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	var out []store.Detection
	err := g.s.query(ctx, `SELECT request_id, at_ms, api, action, guardrail, rule, technique, via, location, start_byte, end_byte, excerpt, detector
		FROM guard_detections WHERE account = $1 AND workspace = $2 AND request_id = $3 ORDER BY seq`,
		[]any{scope.Account, scope.Workspace, requestID}, func(r *sql.Rows) error {
			var d store.Detection
			var at int64
			if err := r.Scan(&d.RequestID, &at, &d.API, &d.Action, &d.Guardrail, &d.Rule, &d.Technique, &d.Via, &d.Location, &d.Start, &d.End, &d.Excerpt, &d.Detector); err != nil {
				return err
			}
			d.At = store.FromMillis(at)
			out = append(out, d)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("detections of request %s: %w", requestID, err)
	}
	return out, nil
}
