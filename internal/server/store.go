package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shellgate/shellgate/internal/metering"
	"github.com/shellgate/shellgate/internal/store"
)

// StoreBackend serves the server's interfaces from an internal/store.Store:
// keys, container records and the usage ledger. A principal is a store
// Scope; the store keeps every read and write within it.
type StoreBackend struct{ St store.Store }

var (
	_ Authenticator = StoreBackend{}
	_ Containers    = StoreBackend{}
	_ Ledger        = StoreBackend{}
)

func scope(p Principal) store.Scope { return store.Scope{Account: p.Account, Workspace: p.Workspace} }

// mapErr turns the store's errors into the server's.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, store.ErrConflict):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case errors.Is(err, store.ErrInvalid):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, store.ErrUnauthorized):
		return fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	return err
}

func (b StoreBackend) Authenticate(ctx context.Context, key string) (Principal, error) {
	k, err := b.St.Keys().Authenticate(ctx, key)
	if err != nil {
		return Principal{}, mapErr(err)
	}
	return Principal{Account: k.Account, Workspace: k.Workspace}, nil
}

func fromStore(c store.Container) Container {
	return Container{ID: c.ID, Name: c.Name, CreatedAt: c.CreatedAt, LastActiveAt: c.LastActiveAt}
}

// Create stores the record; without a name, the name becomes the id the
// store assigned, so the container answers to one id either way.
func (b StoreBackend) Create(ctx context.Context, p Principal, name string) (Container, error) {
	cs := b.St.Containers()
	rec := store.Container{Scope: scope(p), Name: name}
	if name == "" {
		// A placeholder that no caller can choose (SPEC §3.3 names have no
		// '.'), replaced by the id right away.
		rec.Name = store.NewID("pending.")
	}
	c, err := cs.Create(ctx, rec)
	if err != nil {
		return Container{}, mapErr(err)
	}
	if name == "" {
		c.Name = c.ID
		if c, err = cs.Update(ctx, c); err != nil {
			return Container{}, errors.Join(mapErr(err), cs.Delete(context.WithoutCancel(ctx), c.Scope, c.ID))
		}
	}
	return fromStore(c), nil
}

// Lookup takes an id first, then a name.
func (b StoreBackend) Lookup(ctx context.Context, p Principal, ref string) (Container, error) {
	cs := b.St.Containers()
	c, err := cs.Get(ctx, scope(p), ref)
	if errors.Is(err, store.ErrNotFound) {
		c, err = cs.GetByName(ctx, scope(p), ref)
	}
	if err != nil {
		return Container{}, mapErr(err)
	}
	return fromStore(c), nil
}

func (b StoreBackend) List(ctx context.Context, p Principal, opts ListOptions) ([]Container, bool, error) {
	page, err := b.St.Containers().List(ctx, scope(p), store.ListOptions{After: opts.After, Limit: opts.Limit, Order: opts.Order, Name: opts.Name})
	if err != nil {
		return nil, false, mapErr(err)
	}
	out := make([]Container, len(page.Items))
	for i, c := range page.Items {
		out[i] = fromStore(c)
	}
	return out, page.HasMore, nil
}

func (b StoreBackend) Touch(ctx context.Context, p Principal, id string, t time.Time) error {
	cs := b.St.Containers()
	c, err := cs.Get(ctx, scope(p), id)
	if err != nil {
		return mapErr(err)
	}
	c.LastActiveAt = t
	_, err = cs.Update(ctx, c)
	return mapErr(err)
}

func (b StoreBackend) Delete(ctx context.Context, p Principal, id string) error {
	return mapErr(b.St.Containers().Delete(ctx, scope(p), id))
}

func (b StoreBackend) Record(ctx context.Context, p Principal, containerID string, at time.Time, kind string, bill metering.Bill) error {
	return mapErr(b.St.Usage().Record(ctx, store.UsageEvent{Scope: scope(p), ContainerID: containerID, At: at,
		MeteredMillis: bill.MeteredMillis, BilledMillis: bill.BilledMillis, CostMicroUSD: bill.CostMicroUSD, Kind: kind}))
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
		return nil, nil, mapErr(err)
	}
	c, err := u.ByContainer(ctx, scope(p), from, to)
	if err != nil {
		return nil, nil, mapErr(err)
	}
	return conv(d), conv(c), nil
}
