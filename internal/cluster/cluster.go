// Package cluster lets several Shellgate replicas on one database serve
// any request: each replica is a node with an id, an internal URL and a
// heartbeat row; each awake container's node is in the database
// (containers.node), claimed atomically when the container wakes and
// released when it sleeps. A request for a container awake on another
// live node is proxied there (package server); a sleeping container
// wakes where the request arrived when its home is in an archive (S3),
// and otherwise stays on the node that has its home.
//
// Why proxy rather than move an awake container: its processes and
// memory live where it is awake, and moving it would kill them. A
// sleeping container has nothing but its home, which the archive makes
// portable, so it wakes wherever it is asked for.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"time"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/sandbox"
)

// Defaults of Config.
const (
	DefaultHeartbeat = 2 * time.Second
	DefaultWindow    = 10 * time.Second
)

// Config configures a Node.
type Config struct {
	// ID names this replica, unique among those sharing the database
	// (serve: --node-id, default the host name).
	ID string
	// URL is where the other replicas reach this one's API
	// (serve: --advertise-url), e.g. http://10.0.0.5:8080.
	URL   string
	Nodes store.Nodes
	// Heartbeat is how often the node's row is renewed; Window is how
	// long after its last heartbeat a node counts as live (default five
	// heartbeats: a node missing that many is dead and its sleeping
	// containers are taken over).
	Heartbeat, Window time.Duration
	// Portable: homes are kept in a shared archive (sandbox.Config
	// HomeArchive), so a sleeping container, or one whose node is dead,
	// wakes on whichever node a request arrives at. Without it a
	// container stays on the node that has its home.
	Portable bool
	Logger   *slog.Logger
	// Now is the clock of heartbeats and liveness; default time.Now.
	Now func() time.Time
}

// Node is this replica's membership.
type Node struct {
	cfg Config
}

// New checks cfg and records the first heartbeat, so that the node is
// live before it serves.
func New(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.ID == "" || cfg.Nodes == nil {
		return nil, errors.New("cluster: a node id and the store's Nodes are required")
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("cluster: advertise URL %q is not an http(s) URL with a host", cfg.URL)
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Window <= 0 {
		cfg.Window = 5 * cfg.Heartbeat
	}
	if cfg.Window <= cfg.Heartbeat {
		return nil, fmt.Errorf("cluster: liveness window %s must be longer than the heartbeat %s", cfg.Window, cfg.Heartbeat)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	n := &Node{cfg: cfg}
	if err := n.Beat(ctx); err != nil {
		return nil, fmt.Errorf("cluster: first heartbeat: %w", err)
	}
	return n, nil
}

// ID is this node's id.
func (n *Node) ID() string { return n.cfg.ID }

// Portable reports whether homes are in a shared archive.
func (n *Node) Portable() bool { return n.cfg.Portable }

// Beat records one heartbeat.
func (n *Node) Beat(ctx context.Context) error {
	return n.cfg.Nodes.Heartbeat(ctx, n.cfg.ID, n.cfg.URL, n.cfg.Now())
}

// Run beats until ctx ends. A failed heartbeat is logged and retried at
// the next tick: the node stays live for the window.
func (n *Node) Run(ctx context.Context) {
	t := time.NewTicker(n.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := n.Beat(ctx); err != nil && ctx.Err() == nil {
				n.cfg.Logger.Warn("heartbeat failed", "node", n.cfg.ID, "err", err)
			}
		}
	}
}

// live reports whether a node whose last heartbeat is at is live.
func (n *Node) live(at time.Time) bool { return at.After(n.liveAfter()) }

func (n *Node) liveAfter() time.Time { return n.cfg.Now().Add(-n.cfg.Window) }

// Where a request goes.
type Where int

const (
	// Local: serve it here (the container is here, or nowhere and may
	// wake here).
	Local Where = iota
	// Proxy: the container is awake on another live node (Route.URL).
	Proxy
	// Unavailable: the container's home is on a dead node and no
	// archive can bring it here.
	Unavailable
)

// Route is where a request for one container goes.
type Route struct {
	Where Where
	Node  string // the holder, for Proxy and Unavailable
	URL   string // the holder's URL, for Proxy
	// Since is the holder's last heartbeat, for Unavailable.
	Since time.Time
}

// Route tells where a request for the container should be served.
func (n *Node) Route(ctx context.Context, containerID string) (Route, error) {
	loc, err := n.cfg.Nodes.Location(ctx, containerID)
	if err != nil {
		return Route{}, err
	}
	switch {
	case loc.ID == "" || loc.ID == n.cfg.ID:
		return Route{Where: Local}, nil
	case loc.URL != "" && n.live(loc.HeartbeatAt):
		return Route{Where: Proxy, Node: loc.ID, URL: loc.URL}, nil
	case n.cfg.Portable:
		// Its node is dead: the wake here takes it over from the archive.
		return Route{Where: Local}, nil
	}
	return Route{Where: Unavailable, Node: loc.ID, Since: loc.HeartbeatAt}, nil
}

// ElsewhereError is a wake refused because another live node holds the
// container. It matches sandbox.ErrBusy, whose answers (409, "try again")
// fit: the request raced with a wake on that node.
type ElsewhereError struct{ Container, Node string }

func (e *ElsewhereError) Error() string {
	return fmt.Sprintf("container %s is awake on node %s", e.Container, e.Node)
}

func (e *ElsewhereError) Is(target error) bool { return target == sandbox.ErrBusy }

// Archive wraps the sandbox manager's home archive (nil for none) so
// that every wake claims the container for this node first and every
// archived sleep releases it: sandbox.Config.HomeArchive =
// node.Archive(inner). The manager calls it under the sandbox's lock.
func (n *Node) Archive(inner sandbox.HomeArchive) sandbox.HomeArchive {
	return &archive{n: n, inner: inner}
}

type archive struct {
	n     *Node
	inner sandbox.HomeArchive
}

var _ sandbox.CheckpointArchive = (*archive)(nil)

// Restore claims the container, then restores its home. Without an
// archive the claim never passes over a dead holder: only that node has
// the home.
func (a *archive) Restore(ctx context.Context, name, imagePath string) error {
	after := time.Time{}
	if a.inner != nil {
		after = a.n.liveAfter()
	}
	holder, err := a.n.cfg.Nodes.Claim(ctx, name, a.n.cfg.ID, after)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// A sandbox with no container record (the CLI's): nothing to claim.
	case err != nil:
		return fmt.Errorf("claiming container %s for node %s: %w", name, a.n.cfg.ID, err)
	case holder != a.n.cfg.ID:
		return &ElsewhereError{Container: name, Node: holder}
	}
	if a.inner == nil {
		return fs.ErrNotExist // the manager keeps the local home
	}
	return a.inner.Restore(ctx, name, imagePath)
}

// Archive archives the home, then releases the container: another node
// may wake it only once its newest version is in the archive. Without an
// archive the container stays held by this node, which has its home.
func (a *archive) Archive(ctx context.Context, name, imagePath string) error {
	if a.inner == nil {
		return nil
	}
	// A node taken for dead while the container was awake here (a
	// partition, a stall) lost it to another node, which woke the
	// archived version: archiving this copy now would overwrite what that
	// node has done since. Its changes since the last sleep are dropped.
	if loc, err := a.n.cfg.Nodes.Location(ctx, name); err == nil && loc.ID != a.n.cfg.ID {
		a.n.cfg.Logger.Warn("not archiving a home this node no longer holds: its changes since its last sleep are dropped",
			"container", name, "holder", loc.ID)
		return nil
	}
	if err := a.inner.Archive(ctx, name, imagePath); err != nil {
		return err // held: this node has the newest home
	}
	if err := a.n.cfg.Nodes.Release(ctx, name, a.n.cfg.ID); err != nil {
		a.n.cfg.Logger.Warn("releasing a container after its sleep", "container", name, "err", err)
	}
	return nil
}

// ArchiveCheckpoint stores a sleeping container's checkpoint (its running
// state) before Archive releases it. Without an archive it stays on this
// node, which keeps the container (fs.ErrNotExist); an archive that keeps
// no checkpoints refuses it, so that none is left behind here while
// another node wakes the home.
func (a *archive) ArchiveCheckpoint(ctx context.Context, name, dir string) error {
	if a.inner == nil {
		return fs.ErrNotExist
	}
	ca, ok := a.inner.(sandbox.CheckpointArchive)
	if !ok {
		return errors.New("the home archive keeps no checkpoints")
	}
	return ca.ArchiveCheckpoint(ctx, name, dir)
}

// RestoreCheckpoint fetches the checkpoint of the container Restore just
// claimed, if the archive has one.
func (a *archive) RestoreCheckpoint(ctx context.Context, name, dir string) error {
	ca, ok := a.inner.(sandbox.CheckpointArchive)
	if !ok {
		return fs.ErrNotExist
	}
	return ca.RestoreCheckpoint(ctx, name, dir)
}

// DeleteCheckpoint removes a container's checkpoint from the archive.
func (a *archive) DeleteCheckpoint(ctx context.Context, name string) error {
	ca, ok := a.inner.(sandbox.CheckpointArchive)
	if !ok {
		return nil
	}
	return ca.DeleteCheckpoint(ctx, name)
}

// Delete releases the container and deletes its archive.
func (a *archive) Delete(ctx context.Context, name, imagePath string) error {
	if err := a.n.cfg.Nodes.Release(ctx, name, a.n.cfg.ID); err != nil {
		return err
	}
	if a.inner == nil {
		return fs.ErrNotExist
	}
	return a.inner.Delete(ctx, name, imagePath)
}
