package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

type containers struct{ s *DB }

const containerCols = `id, account, workspace, name, image, cpu_millis, memory_bytes, processes, disk_bytes, network_policy, status, created_at_ms, last_active_at_ms, expires_at_ms`

type scanner interface{ Scan(dest ...any) error }

func scanContainer(r scanner) (store.Container, error) {
	var c store.Container
	var policy string
	var created, active, expires int64
	err := r.Scan(&c.ID, &c.Scope.Account, &c.Scope.Workspace, &c.Name, &c.Image,
		&c.Limits.CPUMillis, &c.Limits.MemoryBytes, &c.Limits.Processes, &c.Limits.DiskBytes,
		&policy, &c.Status, &created, &active, &expires)
	if policy != "" {
		c.NetworkPolicy = []byte(policy)
	}
	c.CreatedAt, c.LastActiveAt, c.ExpiresAt = store.FromMillis(created), store.FromMillis(active), store.FromMillis(expires)
	return c, err
}

const insertContainer = `INSERT INTO containers (` + containerCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`

func containerArgs(c store.Container) []any {
	return []any{c.ID, c.Scope.Account, c.Scope.Workspace, c.Name, c.Image,
		c.Limits.CPUMillis, c.Limits.MemoryBytes, c.Limits.Processes, c.Limits.DiskBytes,
		string(c.NetworkPolicy), c.Status, store.Millis(c.CreatedAt), store.Millis(c.LastActiveAt), store.Millis(c.ExpiresAt)}
}

func (cs containers) Create(ctx context.Context, c store.Container) (store.Container, error) {
	return cs.CreateWithin(ctx, c, 0)
}

func (cs containers) CreateWithin(ctx context.Context, c store.Container, max int) (store.Container, error) {
	if err := c.Prepare(time.Now()); err != nil {
		return store.Container{}, err
	}
	c.ID = store.NewID("cntr")
	var check func(tx *sql.Tx) error
	if max >= 1 {
		check = func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM containers WHERE account = $1 AND workspace = $2 AND status <> $3`,
				c.Scope.Account, c.Scope.Workspace, store.StatusExpired).Scan(&n); err != nil {
				return err
			}
			if n >= max {
				return fmt.Errorf("the scope has %d containers that are not expired, its cap of %d: %w", n, max, store.ErrQuota)
			}
			return nil
		}
	}
	if err := cs.s.insertWithin(ctx, c.Scope, check, insertContainer, containerArgs(c),
		fmt.Sprintf("container named %q", c.Name), fmt.Sprintf("creating container %q", c.Name)); err != nil {
		return store.Container{}, err
	}
	return c, nil
}

func (cs containers) get(ctx context.Context, scope store.Scope, col, v string) (store.Container, error) {
	return getScoped(ctx, cs.s, "containers", containerCols, "container", scanContainer, scope, col, v)
}

func (cs containers) Get(ctx context.Context, scope store.Scope, id string) (store.Container, error) {
	return cs.get(ctx, scope, "id", id)
}

func (cs containers) GetByName(ctx context.Context, scope store.Scope, name string) (store.Container, error) {
	return cs.get(ctx, scope, "name", name)
}

func (cs containers) List(ctx context.Context, scope store.Scope, opts store.ListOptions) (store.Page[store.Container], error) {
	var filters map[string]string
	if opts.Name != "" {
		filters = map[string]string{"name": opts.Name}
	}
	return listPage(ctx, cs.s, "containers", containerCols, scope, opts, filters, scanContainer)
}

func (cs containers) Update(ctx context.Context, c store.Container) (store.Container, error) {
	if err := c.Prepare(time.Now()); err != nil {
		return store.Container{}, err
	}
	n, err := cs.s.exec(ctx, `UPDATE containers SET name = $4, image = $5, cpu_millis = $6, memory_bytes = $7, processes = $8, disk_bytes = $9,
		network_policy = $10, status = $11, last_active_at_ms = $12, expires_at_ms = $13
		WHERE account = $1 AND workspace = $2 AND id = $3`,
		c.Scope.Account, c.Scope.Workspace, c.ID, c.Name, c.Image,
		c.Limits.CPUMillis, c.Limits.MemoryBytes, c.Limits.Processes, c.Limits.DiskBytes,
		string(c.NetworkPolicy), c.Status, store.Millis(c.LastActiveAt), store.Millis(c.ExpiresAt))
	if cs.s.dialect.isUnique(err) {
		return store.Container{}, fmt.Errorf("container named %q: %w", c.Name, store.ErrConflict)
	}
	if err != nil {
		return store.Container{}, fmt.Errorf("updating container %s: %w", c.ID, err)
	}
	if n == 0 {
		return store.Container{}, fmt.Errorf("container %s: %w", c.ID, store.ErrNotFound)
	}
	return cs.Get(ctx, c.Scope, c.ID)
}

func (cs containers) Delete(ctx context.Context, scope store.Scope, id string) error {
	return cs.s.deleteScoped(ctx, "containers", "container", scope, id)
}

// lastUseSQL is Container.LastUse in SQL.
const lastUseSQL = `(CASE WHEN last_active_at_ms > 0 THEN last_active_at_ms ELSE created_at_ms END)`

func (cs containers) Touch(ctx context.Context, scope store.Scope, id string, t time.Time) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	ms := store.Millis(store.Truncate(t))
	// SET expressions read the row as it was, so the expiry moves by the
	// time since the previous use.
	n, err := cs.s.exec(ctx, `UPDATE containers SET
		expires_at_ms = CASE WHEN expires_at_ms > 0 THEN expires_at_ms + ($4 - `+lastUseSQL+`) ELSE 0 END,
		last_active_at_ms = $4
		WHERE account = $1 AND workspace = $2 AND id = $3 AND status <> $5 AND `+lastUseSQL+` < $4`,
		scope.Account, scope.Workspace, id, ms, store.StatusExpired)
	if err != nil {
		return fmt.Errorf("touching container %s: %w", id, err)
	}
	if n == 0 {
		// Expired, or already used at t or later: nothing to write. Only
		// a missing row is an error.
		_, err := cs.Get(ctx, scope, id)
		return err
	}
	return nil
}

func (cs containers) Find(ctx context.Context, id string) (store.Container, error) {
	var c store.Container
	err := cs.s.retry(ctx, func() error {
		var err error
		c, err = scanContainer(cs.s.db.QueryRowContext(ctx, `SELECT `+containerCols+` FROM containers WHERE id = $1`, id))
		return err
	})
	if err != nil {
		return store.Container{}, notFound(err, "container", id)
	}
	return c, nil
}

func (cs containers) Expiring(ctx context.Context, now, idleBefore time.Time, limit int) ([]store.Container, error) {
	if limit < 1 || limit > store.MaxPageSize {
		return nil, fmt.Errorf("%w: limit %d: want 1-%d", store.ErrInvalid, limit, store.MaxPageSize)
	}
	var out []store.Container
	err := cs.s.query(ctx, `SELECT `+containerCols+` FROM containers WHERE status <> $1
		AND ((expires_at_ms > 0 AND expires_at_ms <= $2) OR (expires_at_ms = 0 AND `+lastUseSQL+` <= $3))
		ORDER BY created_at_ms, id LIMIT $4`,
		[]any{store.StatusExpired, store.Millis(store.Truncate(now)), store.Millis(store.Truncate(idleBefore)), limit},
		func(r *sql.Rows) error {
			c, err := scanContainer(r)
			out = append(out, c)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("listing expiring containers: %w", err)
	}
	return out, nil
}

func (cs containers) Expire(ctx context.Context, id string, lastActive time.Time) (bool, error) {
	n, err := cs.s.exec(ctx, `UPDATE containers SET status = $1 WHERE id = $2 AND status <> $1 AND last_active_at_ms = $3`,
		store.StatusExpired, id, store.Millis(store.Truncate(lastActive)))
	if err != nil {
		return false, fmt.Errorf("expiring container %s: %w", id, err)
	}
	return n > 0, nil
}
