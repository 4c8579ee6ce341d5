package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// nodes are the replicas' heartbeats and the containers' locations
// (containers.node). A claim is one conditional UPDATE: the row's new
// value is decided by the database under its row lock, so two replicas
// racing for one container cannot both win.
type nodes struct{ s *DB }

func (n nodes) Heartbeat(ctx context.Context, id, url string, at time.Time) error {
	if id == "" {
		return fmt.Errorf("node id is empty: %w", store.ErrInvalid)
	}
	_, err := n.s.exec(ctx, `INSERT INTO nodes (id, url, heartbeat_at_ms) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET url = excluded.url, heartbeat_at_ms = excluded.heartbeat_at_ms`, id, url, at.UnixMilli())
	return err
}

func (n nodes) Get(ctx context.Context, id string) (store.Node, error) {
	var nd store.Node
	var ms int64
	err := n.s.queryRow(ctx, `SELECT id, url, heartbeat_at_ms FROM nodes WHERE id = $1`, []any{id}, &nd.ID, &nd.URL, &ms)
	if err != nil {
		return store.Node{}, notFound(err, "node", id)
	}
	nd.HeartbeatAt = time.UnixMilli(ms).UTC()
	return nd, nil
}

func (n nodes) List(ctx context.Context) ([]store.Node, error) {
	var out []store.Node
	err := n.s.query(ctx, `SELECT id, url, heartbeat_at_ms FROM nodes ORDER BY id`, nil, func(r *sql.Rows) error {
		var nd store.Node
		var ms int64
		if err := r.Scan(&nd.ID, &nd.URL, &ms); err != nil {
			return err
		}
		nd.HeartbeatAt = time.UnixMilli(ms).UTC()
		out = append(out, nd)
		return nil
	})
	return out, err
}

func (n nodes) Claim(ctx context.Context, containerID, node string, liveAfter time.Time) (string, error) {
	if node == "" {
		return "", fmt.Errorf("node id is empty: %w", store.ErrInvalid)
	}
	// A holder that released between the failed UPDATE and the read is
	// tried again; a few rounds settle any race.
	for range 5 {
		k, err := n.s.exec(ctx, `UPDATE containers SET node = $2 WHERE id = $1 AND (node = '' OR node = $2
			OR NOT EXISTS (SELECT 1 FROM nodes WHERE nodes.id = containers.node AND nodes.heartbeat_at_ms > $3))`,
			containerID, node, liveAfter.UnixMilli())
		if err != nil {
			return "", err
		}
		if k == 1 {
			return node, nil
		}
		var holder string
		if err := n.s.queryRow(ctx, `SELECT node FROM containers WHERE id = $1`, []any{containerID}, &holder); err != nil {
			return "", notFound(err, "container", containerID)
		}
		if holder != "" && holder != node {
			return holder, nil
		}
	}
	return "", errors.New("claiming container " + containerID + ": the location kept changing")
}

func (n nodes) Release(ctx context.Context, containerID, node string) error {
	_, err := n.s.exec(ctx, `UPDATE containers SET node = '' WHERE id = $1 AND node = $2`, containerID, node)
	return err
}

func (n nodes) Location(ctx context.Context, containerID string) (store.Node, error) {
	var id, url string
	var ms sql.NullInt64
	err := n.s.queryRow(ctx, `SELECT c.node, COALESCE(n.url, ''), n.heartbeat_at_ms FROM containers c
		LEFT JOIN nodes n ON n.id = c.node WHERE c.id = $1`, []any{containerID}, &id, &url, &ms)
	if err != nil {
		return store.Node{}, notFound(err, "container", containerID)
	}
	nd := store.Node{ID: id, URL: url}
	if ms.Valid {
		nd.HeartbeatAt = time.UnixMilli(ms.Int64).UTC()
	}
	return nd, nil
}
