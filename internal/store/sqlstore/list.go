package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/shellgate/shellgate/internal/store"
)

// listPage selects one page of table's rows in scope, ordered by
// (created_at_ms, id), after the cursor row, with optional equality
// filters, each row's cols read by scan. It reads Limit+1 rows to learn
// whether more follow. The cursor must be a row of the same scope:
// another scope's id is ErrNotFound like an unknown one. Errors say
// "listing " and table.
func listPage[T any](ctx context.Context, s *DB, table, cols string, scope store.Scope, opts store.ListOptions, filters map[string]string, scan func(scanner) (T, error)) (page store.Page[T], err error) {
	defer func() {
		if err != nil {
			page, err = store.Page[T]{}, fmt.Errorf("listing %s: %w", table, err)
		}
	}()
	if err := scope.Validate(); err != nil {
		return page, err
	}
	if err := opts.Validate(); err != nil {
		return page, err
	}
	args := []any{scope.Account, scope.Workspace}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var q strings.Builder
	fmt.Fprintf(&q, `SELECT %s FROM %s WHERE account = $1 AND workspace = $2`, cols, table)
	for col, v := range filters { // at most one today; order does not matter
		fmt.Fprintf(&q, ` AND %s = %s`, col, arg(v))
	}
	cmp, dir := ">", "ASC"
	if opts.Order == store.Desc {
		cmp, dir = "<", "DESC"
	}
	if opts.After != "" {
		at, err := s.cursorAt(ctx, table, scope, opts.After)
		if err != nil {
			return page, err
		}
		a, id := arg(at), arg(opts.After)
		fmt.Fprintf(&q, ` AND (created_at_ms %s %s OR (created_at_ms = %s AND id %s %s))`, cmp, a, a, cmp, id)
	}
	fmt.Fprintf(&q, ` ORDER BY created_at_ms %s, id %s LIMIT %s`, dir, dir, arg(opts.Limit+1))
	return queryPage(ctx, s, q.String(), args, opts.Limit, scan)
}

// cursorAt is the created_at_ms of the cursor row id of table in scope:
// ErrNotFound when the scope has no such row.
func (s *DB) cursorAt(ctx context.Context, table string, scope store.Scope, id string) (int64, error) {
	var at int64
	err := s.queryRow(ctx, `SELECT created_at_ms FROM `+table+` WHERE account = $1 AND workspace = $2 AND id = $3`,
		[]any{scope.Account, scope.Workspace, id}, &at)
	if err != nil {
		return 0, notFound(err, "cursor", id)
	}
	return at, nil
}

// queryPage runs q, which selects up to limit+1 rows, and reads the first
// limit with scan into a page; a row after them sets HasMore.
func queryPage[T any](ctx context.Context, s *DB, q string, args []any, limit int, scan func(scanner) (T, error)) (store.Page[T], error) {
	var page store.Page[T]
	err := s.query(ctx, q, args, func(r *sql.Rows) error {
		if len(page.Items) == limit {
			page.HasMore = true
			return nil
		}
		x, err := scan(r)
		page.Items = append(page.Items, x)
		return err
	})
	return page, err
}
