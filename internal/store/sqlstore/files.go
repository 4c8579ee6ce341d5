package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

type files struct{ s *DB }

const fileCols = `id, account, workspace, name, bytes, sha256, created_at_ms, purpose, source`

func scanFile(r scanner) (store.File, error) {
	var f store.File
	var created int64
	err := r.Scan(&f.ID, &f.Scope.Account, &f.Scope.Workspace, &f.Name, &f.Bytes, &f.SHA256, &created, &f.Purpose, &f.Source)
	f.CreatedAt = store.FromMillis(created)
	return f, err
}

const insertFile = `INSERT INTO files (` + fileCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`

func (fs files) Create(ctx context.Context, f store.File) (store.File, error) {
	return fs.CreateWithin(ctx, f, 0)
}

const usedSQL = `SELECT COALESCE(SUM(bytes), 0) FROM files WHERE account = $1 AND workspace = $2`

func (fs files) CreateWithin(ctx context.Context, f store.File, maxBytes int64) (store.File, error) {
	if err := f.Prepare(time.Now()); err != nil {
		return store.File{}, err
	}
	if !store.ValidFileID(f.ID) {
		f.ID = store.NewID("file")
	}
	args := []any{f.ID, f.Scope.Account, f.Scope.Workspace, f.Name, f.Bytes, f.SHA256, store.Millis(f.CreatedAt), f.Purpose, f.Source}
	var check func(tx *sql.Tx) error
	if maxBytes >= 1 {
		check = func(tx *sql.Tx) error {
			var used int64
			if err := tx.QueryRowContext(ctx, usedSQL, f.Scope.Account, f.Scope.Workspace).Scan(&used); err != nil {
				return err
			}
			if used+f.Bytes > maxBytes {
				return fmt.Errorf("the scope's files hold %d bytes: %d more is over its cap of %d: %w", used, f.Bytes, maxBytes, store.ErrQuota)
			}
			return nil
		}
	}
	if err := fs.s.insertWithin(ctx, f.Scope, check, insertFile, args,
		fmt.Sprintf("file %s", f.ID), fmt.Sprintf("creating file %q", f.Name)); err != nil {
		return store.File{}, err
	}
	return f, nil
}

func (fs files) Used(ctx context.Context, scope store.Scope) (int64, error) {
	if err := scope.Validate(); err != nil {
		return 0, err
	}
	var used int64
	if err := fs.s.queryRow(ctx, usedSQL, []any{scope.Account, scope.Workspace}, &used); err != nil {
		return 0, fmt.Errorf("summing the files of %s/%s: %w", scope.Account, scope.Workspace, err)
	}
	return used, nil
}

func (fs files) Get(ctx context.Context, scope store.Scope, id string) (store.File, error) {
	return getScoped(ctx, fs.s, "files", fileCols, "file", scanFile, scope, "id", id)
}

func (fs files) List(ctx context.Context, scope store.Scope, opts store.ListOptions) (store.Page[store.File], error) {
	if opts.Name != "" {
		return store.Page[store.File]{}, fmt.Errorf("%w: files are not listed by name", store.ErrInvalid)
	}
	return listPage(ctx, fs.s, "files", fileCols, scope, opts, nil, scanFile)
}

func (fs files) Delete(ctx context.Context, scope store.Scope, id string) error {
	return fs.s.deleteScoped(ctx, "files", "file", scope, id)
}

// missingBatch bounds the ids of one query (SQLite allows 32,766
// parameters, PostgreSQL 65,535).
const missingBatch = 500

func (fs files) Missing(ctx context.Context, ids []string) ([]string, error) {
	var missing []string
	for chunk := range slices.Chunk(ids, missingBatch) {
		m, err := fs.missing(ctx, chunk)
		if err != nil {
			return nil, err
		}
		missing = append(missing, m...)
	}
	return missing, nil
}

func (fs files) missing(ctx context.Context, ids []string) ([]string, error) {
	args := make([]any, len(ids))
	var q strings.Builder
	q.WriteString(`SELECT id FROM files WHERE id IN (`)
	for i, id := range ids {
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "$%d", i+1)
		args[i] = id
	}
	q.WriteString(")")
	found := make(map[string]bool, len(ids))
	err := fs.s.retry(ctx, func() error {
		clear(found)
		rows, err := fs.s.db.QueryContext(ctx, q.String(), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			found[id] = true
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("looking up files: %w", err)
	}
	var missing []string
	for _, id := range ids {
		if !found[id] {
			missing = append(missing, id)
		}
	}
	return missing, nil
}
