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
		var at int64
		err := s.queryRow(ctx, `SELECT created_at_ms FROM `+table+` WHERE account = $1 AND workspace = $2 AND id = $3`,
			[]any{scope.Account, scope.Workspace, opts.After}, &at)
		if err != nil {
			return page, notFound(err, "cursor", opts.After)
		}
		a, id := arg(at), arg(opts.After)
		fmt.Fprintf(&q, ` AND (created_at_ms %s %s OR (created_at_ms = %s AND id %s %s))`, cmp, a, a, cmp, id)
	}
	fmt.Fprintf(&q, ` ORDER BY created_at_ms %s, id %s LIMIT %s`, dir, dir, arg(opts.Limit+1))
	err = s.query(ctx, q.String(), args, func(r *sql.Rows) error {
		if len(page.Items) == opts.Limit {
			page.HasMore = true
			return nil
		}
		x, err := scan(r)
		page.Items = append(page.Items, x)
		return err
	})
	return page, err
}
