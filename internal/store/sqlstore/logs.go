package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

type logs struct{ s *DB }

func (l logs) Settings(ctx context.Context, scope store.Scope) (store.LogSettings, error) {
	if err := scope.Validate(); err != nil {
		return store.LogSettings{}, err
	}
	var enabled, days, max int64
	err := l.s.queryRow(ctx, `SELECT enabled, retention_days, max_record_bytes FROM log_settings WHERE account = $1 AND workspace = $2`,
		[]any{scope.Account, scope.Workspace}, &enabled, &days, &max)
	if errors.Is(err, sql.ErrNoRows) {
		return store.DefaultLogSettings, nil
	}
	if err != nil {
		return store.LogSettings{}, fmt.Errorf("log settings of %s/%s: %w", scope.Account, scope.Workspace, err)
	}
	return store.LogSettings{Enabled: enabled != 0, RetentionDays: int(days), MaxRecordBytes: int(max)}, nil
}

func (l logs) PutSettings(ctx context.Context, scope store.Scope, st store.LogSettings) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	if err := st.Validate(); err != nil {
		return err
	}
	_, err := l.s.exec(ctx, `INSERT INTO log_settings (account, workspace, enabled, retention_days, max_record_bytes, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (account, workspace) DO UPDATE SET enabled = excluded.enabled, retention_days = excluded.retention_days,
		max_record_bytes = excluded.max_record_bytes, updated_at_ms = excluded.updated_at_ms`,
		scope.Account, scope.Workspace, b2i(st.Enabled), st.RetentionDays, st.MaxRecordBytes, store.Millis(time.Now()))
	if err != nil {
		return fmt.Errorf("storing the log settings of %s/%s: %w", scope.Account, scope.Workspace, err)
	}
	return nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (l logs) Record(ctx context.Context, r store.RequestLog) (store.RequestLog, error) {
	if err := r.Scope.Validate(); err != nil {
		return r, err
	}
	if r.ID == "" {
		r.ID = store.NewID("log")
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now()
	}
	r.CreatedAt = store.FromMillis(store.Millis(r.CreatedAt))
	_, err := l.s.exec(ctx, `INSERT INTO request_logs (id, account, workspace, request_id, created_at_ms, api, model, status, http_status, duration_ms,
		container_id, input_tokens, output_tokens, cost_micro_usd, tool_calls, truncated, user_agent, body)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18) ON CONFLICT (id) DO NOTHING`,
		r.ID, r.Scope.Account, r.Scope.Workspace, r.RequestID, store.Millis(r.CreatedAt), r.API, r.Model, r.Status, r.HTTPStatus, r.DurationMillis,
		r.ContainerID, r.InputTokens, r.OutputTokens, r.CostMicroUSD, r.ToolCalls, b2i(r.Truncated), r.UserAgent, r.Body)
	if err != nil {
		return r, fmt.Errorf("recording request log %s: %w", r.ID, err)
	}
	return r, nil
}

// logCols are a record's columns but its body, with its detection count.
const logCols = `l.id, l.account, l.workspace, l.request_id, l.created_at_ms, l.api, l.model, l.status, l.http_status, l.duration_ms,
	l.container_id, l.input_tokens, l.output_tokens, l.cost_micro_usd, l.tool_calls, l.truncated, l.user_agent,
	(SELECT COUNT(*) FROM guard_detections d WHERE d.account = l.account AND d.workspace = l.workspace AND d.request_id = l.request_id)`

func scanLog(r scanner, extra ...any) (store.RequestLog, error) {
	var l store.RequestLog
	var at, trunc int64
	dest := append([]any{&l.ID, &l.Scope.Account, &l.Scope.Workspace, &l.RequestID, &at, &l.API, &l.Model, &l.Status, &l.HTTPStatus, &l.DurationMillis,
		&l.ContainerID, &l.InputTokens, &l.OutputTokens, &l.CostMicroUSD, &l.ToolCalls, &trunc, &l.UserAgent, &l.Detections}, extra...)
	if err := r.Scan(dest...); err != nil {
		return l, err
	}
	l.CreatedAt, l.Truncated = store.FromMillis(at), trunc != 0
	return l, nil
}

func (l logs) List(ctx context.Context, scope store.Scope, f store.LogFilter) (store.Page[store.RequestLog], error) {
	var page store.Page[store.RequestLog]
	if err := scope.Validate(); err != nil {
		return page, err
	}
	if f.Limit < 1 || f.Limit > store.MaxPageSize {
		return page, fmt.Errorf("%w: limit %d: want 1-%d", store.ErrInvalid, f.Limit, store.MaxPageSize)
	}
	args := []any{scope.Account, scope.Workspace}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var q strings.Builder
	fmt.Fprintf(&q, `SELECT %s FROM request_logs l WHERE l.account = $1 AND l.workspace = $2`, logCols)
	for _, eq := range []struct{ col, v string }{{"api", f.API}, {"model", f.Model}, {"container_id", f.ContainerID}, {"status", f.Status}} {
		if eq.v != "" {
			fmt.Fprintf(&q, ` AND l.%s = %s`, eq.col, arg(eq.v))
		}
	}
	if !f.Since.IsZero() {
		fmt.Fprintf(&q, ` AND l.created_at_ms >= %s`, arg(f.Since.UnixMilli()))
	}
	if !f.Until.IsZero() {
		fmt.Fprintf(&q, ` AND l.created_at_ms < %s`, arg(f.Until.UnixMilli()))
	}
	if f.HasDetections != nil {
		not := ""
		if !*f.HasDetections {
			not = "NOT "
		}
		fmt.Fprintf(&q, ` AND %sEXISTS (SELECT 1 FROM guard_detections d WHERE d.account = l.account AND d.workspace = l.workspace AND d.request_id = l.request_id)`, not)
	}
	if f.After != "" {
		at, err := l.s.cursorAt(ctx, "request_logs", scope, f.After)
		if err != nil {
			return page, err
		}
		a, id := arg(at), arg(f.After)
		fmt.Fprintf(&q, ` AND (l.created_at_ms < %s OR (l.created_at_ms = %s AND l.id < %s))`, a, a, id)
	}
	fmt.Fprintf(&q, ` ORDER BY l.created_at_ms DESC, l.id DESC LIMIT %s`, arg(f.Limit+1))
	page, err := queryPage(ctx, l.s, q.String(), args, f.Limit, func(r scanner) (store.RequestLog, error) { return scanLog(r) })
	if err != nil {
		return store.Page[store.RequestLog]{}, fmt.Errorf("listing request logs: %w", err)
	}
	return page, nil
}

func (l logs) Get(ctx context.Context, scope store.Scope, id string) (store.RequestLog, error) {
	if err := scope.Validate(); err != nil {
		return store.RequestLog{}, err
	}
	var rec store.RequestLog
	found := false
	err := l.s.query(ctx, `SELECT `+logCols+`, l.body FROM request_logs l WHERE l.account = $1 AND l.workspace = $2 AND l.id = $3`,
		[]any{scope.Account, scope.Workspace, id}, func(r *sql.Rows) error {
			var body string
			var err error
			rec, err = scanLog(r, &body)
			rec.Body, found = body, true
			return err
		})
	if err == nil && !found {
		err = sql.ErrNoRows
	}
	if err != nil {
		return store.RequestLog{}, notFound(err, "request log", id)
	}
	return rec, nil
}

func (l logs) Sweep(ctx context.Context, now time.Time, limit int) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("%w: limit %d", store.ErrInvalid, limit)
	}
	const day = int64(24 * time.Hour / time.Millisecond)
	ms := now.UnixMilli()
	n, err := l.s.exec(ctx, `DELETE FROM request_logs WHERE id IN (
		SELECT l.id FROM request_logs l LEFT JOIN log_settings s ON s.account = l.account AND s.workspace = l.workspace
		WHERE l.created_at_ms < $1 AND l.created_at_ms < $2 - COALESCE(s.retention_days, $3) * $4 LIMIT $5)`,
		ms-day, ms, store.DefaultLogSettings.RetentionDays, day, limit)
	if err != nil {
		return int(n), fmt.Errorf("sweeping request logs: %w", err)
	}
	return int(n), nil
}
