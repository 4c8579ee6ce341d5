package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/shellgate/shellgate/internal/metering"
	"github.com/shellgate/shellgate/internal/store"
)

// StoreBackend serves the server's interfaces from an internal/store.Store:
// keys, container records and the usage ledger. A principal is a store
// Scope; the store keeps every read and write within it.
type StoreBackend struct {
	St store.Store
	// Blobs holds the bytes of the workspace's files (for file_ids on
	// create); without it such a create is refused.
	Blobs store.Blobs
}

var (
	_ Authenticator  = StoreBackend{}
	_ Containers     = StoreBackend{}
	_ Ledger         = StoreBackend{}
	_ WorkspaceFiles = StoreBackend{}
)

func scope(p Principal) store.Scope { return store.Scope{Account: p.Account, Workspace: p.Workspace} }

func (b StoreBackend) Authenticate(ctx context.Context, key string) (Principal, error) {
	k, err := b.St.Keys().Authenticate(ctx, key)
	if err != nil {
		return Principal{}, err
	}
	return Principal{Account: k.Account, Workspace: k.Workspace}, nil
}

func fromStore(c store.Container) (Container, error) {
	out := Container{ID: c.ID, Owner: Principal{Account: c.Scope.Account, Workspace: c.Scope.Workspace}, Name: c.Name,
		Limits:  c.Limits,
		Expired: c.Status == store.StatusExpired, CreatedAt: c.CreatedAt, LastActiveAt: c.LastActiveAt, ExpiresAt: c.ExpiresAt}
	if len(c.NetworkPolicy) > 0 {
		var np NetworkPolicy
		if err := json.Unmarshal(c.NetworkPolicy, &np); err != nil {
			return Container{}, fmt.Errorf("container %s: stored network policy: %w", c.ID, err)
		}
		if np.Type != "disabled" {
			out.NetworkPolicy = &np
		}
	}
	return out, nil
}

// Create stores a record on the defaults.
func (b StoreBackend) Create(ctx context.Context, p Principal, name string) (Container, error) {
	return b.CreateSpec(ctx, p, ContainerSpec{Name: name})
}

// CreateSpec stores the record; without a name, the name becomes the id
// the store assigned, so the container answers to one id either way.
func (b StoreBackend) CreateSpec(ctx context.Context, p Principal, spec ContainerSpec) (Container, error) {
	cs := b.St.Containers()
	now := spec.CreatedAt
	if now.IsZero() {
		now = time.Now()
	}
	now = store.Truncate(now)
	rec := store.Container{Scope: scope(p), Name: spec.Name, CreatedAt: now, LastActiveAt: now, Limits: spec.Limits}
	if spec.ExpiresAfter > 0 {
		rec.ExpiresAt = now.Add(spec.ExpiresAfter)
	}
	if spec.NetworkPolicy != nil {
		j, err := json.Marshal(spec.NetworkPolicy)
		if err != nil {
			return Container{}, err
		}
		rec.NetworkPolicy = j
	}
	if spec.Name == "" {
		// A placeholder of 128 random bits, replaced by the id right away.
		rec.Name = store.NewID("pending.")
	}
	c, err := cs.CreateWithin(ctx, rec, spec.MaxContainers)
	if err != nil {
		return Container{}, err
	}
	if spec.Name == "" {
		c.Name = c.ID
		if c, err = cs.Update(ctx, c); err != nil {
			return Container{}, errors.Join(err, cs.Delete(context.WithoutCancel(ctx), c.Scope, c.ID))
		}
	}
	return fromStore(c)
}

// Lookup takes an id first, then a name.
func (b StoreBackend) Lookup(ctx context.Context, p Principal, ref string) (Container, error) {
	cs := b.St.Containers()
	c, err := cs.Get(ctx, scope(p), ref)
	if errors.Is(err, store.ErrNotFound) {
		c, err = cs.GetByName(ctx, scope(p), ref)
	}
	if err != nil {
		return Container{}, err
	}
	return fromStore(c)
}

func (b StoreBackend) List(ctx context.Context, p Principal, opts ListOptions) ([]Container, bool, error) {
	page, err := b.St.Containers().List(ctx, scope(p), store.ListOptions{After: opts.After, Limit: opts.Limit, Order: opts.Order, Name: opts.Name})
	if err != nil {
		return nil, false, err
	}
	out := make([]Container, len(page.Items))
	for i, c := range page.Items {
		if out[i], err = fromStore(c); err != nil {
			return nil, false, err
		}
	}
	return out, page.HasMore, nil
}

func (b StoreBackend) Touch(ctx context.Context, p Principal, id string, t time.Time) error {
	return b.St.Containers().Touch(ctx, scope(p), id, t)
}

func (b StoreBackend) Delete(ctx context.Context, p Principal, id string) error {
	return b.St.Containers().Delete(ctx, scope(p), id)
}

func (b StoreBackend) Find(ctx context.Context, id string) (Container, error) {
	c, err := b.St.Containers().Find(ctx, id)
	if err != nil {
		return Container{}, err
	}
	return fromStore(c)
}

func (b StoreBackend) Expiring(ctx context.Context, now, idleBefore time.Time, limit int) ([]Container, error) {
	cs, err := b.St.Containers().Expiring(ctx, now, idleBefore, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Container, len(cs))
	for i, c := range cs {
		if out[i], err = fromStore(c); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (b StoreBackend) Expire(ctx context.Context, id string, lastActive time.Time) (bool, error) {
	ok, err := b.St.Containers().Expire(ctx, id, lastActive)
	return ok, err
}

func (b StoreBackend) Record(ctx context.Context, p Principal, id, containerID string, at time.Time, kind string, bill metering.Bill) error {
	return b.St.Usage().Record(ctx, store.UsageEvent{ID: id, Scope: scope(p), ContainerID: containerID, At: at,
		MeteredMillis: bill.MeteredMillis, BilledMillis: bill.BilledMillis, CostMicroUSD: bill.CostMicroUSD, Kind: kind})
}

func (b StoreBackend) Totals(ctx context.Context, p Principal, from, to time.Time) (byDay, byContainer []UsageTotal, err error) {
	conv := func(ts []store.UsageTotal) []UsageTotal {
		out := make([]UsageTotal, len(ts))
		for i, t := range ts {
			out[i] = UsageTotal{Day: t.Day, ContainerID: t.ContainerID, Events: t.Events,
				MeteredMillis: t.MeteredMillis, BilledMillis: t.BilledMillis, CostMicroUSD: t.CostMicroUSD}
		}
		return out
	}
	u := b.St.Usage()
	d, err := u.ByDay(ctx, scope(p), from, to)
	if err != nil {
		return nil, nil, err
	}
	c, err := u.ByContainer(ctx, scope(p), from, to)
	if err != nil {
		return nil, nil, err
	}
	return conv(d), conv(c), nil
}

// OpenFile opens a workspace file of p's for reading.
func (b StoreBackend) OpenFile(ctx context.Context, p Principal, id string) (string, io.ReadCloser, error) {
	f, err := b.St.Files().Get(ctx, scope(p), id)
	if err != nil {
		return "", nil, err
	}
	if b.Blobs == nil {
		return "", nil, errors.New("this server keeps no file bytes (StoreBackend.Blobs is nil)")
	}
	rc, _, err := b.Blobs.Open(ctx, f.ID)
	if err != nil {
		return "", nil, err
	}
	return f.Name, rc, nil
}
