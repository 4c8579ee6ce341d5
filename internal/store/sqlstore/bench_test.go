package sqlstore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/store/pgtest"
)

var (
	durableOnce sync.Once
	durable     *pgtest.Server
	durableErr  error
)

// durablePG is a PostgreSQL server with its default durability (fsync on
// every commit, as SQLite's synchronous=FULL here), for a fair comparison.
func durablePG(b *testing.B) *pgtest.Server {
	pgtest.Shared(b) // skips or fails without PostgreSQL
	durableOnce.Do(func() { durable, durableErr = pgtest.StartWith(pgtest.BinDir(), pgtest.Options{Durable: true}) })
	if durableErr != nil {
		b.Fatal(durableErr)
	}
	return durable
}

// BenchmarkStore measures the statements one exec request makes, on
// SQLite (DATA/shellgate.db) and on PostgreSQL over loopback TCP, one
// caller at a time and from 16 callers at once:
//
//   - lookup: Get of a container record (what every request reads);
//   - exec-path: Authenticate the key, Get the container, Touch it, Record
//     the usage event: 2 reads and 2 writes (both committed durably).
//
// go test -run '^$' -bench BenchmarkStore -benchtime 3s ./internal/store/sqlstore/
func BenchmarkStore(b *testing.B) {
	for _, db := range []string{"sqlite", "postgres"} {
		b.Run(db, func(b *testing.B) {
			var st *DB
			var err error
			if db == "sqlite" {
				st, err = OpenSQLite(b.Context(), b.TempDir())
			} else {
				st, err = OpenPostgres(b.Context(), durablePG(b).NewDatabase(b))
			}
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			scope := store.Scope{Account: "acme", Workspace: "prod"}
			_, token, err := st.Keys().Create(b.Context(), scope)
			if err != nil {
				b.Fatal(err)
			}
			const nContainers = 64
			ids := make([]string, nContainers)
			for i := range ids {
				c, err := st.Containers().Create(b.Context(), store.Container{Scope: scope, Name: fmt.Sprintf("c%d", i), Status: store.StatusRunning})
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = c.ID
			}
			var clock, next atomic.Int64
			base := time.Now()
			lookup := func(i int) error {
				_, err := st.Containers().Get(b.Context(), scope, ids[i%nContainers])
				return err
			}
			execPath := func(i int) error {
				id := ids[i%nContainers]
				if _, err := st.Keys().Authenticate(b.Context(), token); err != nil {
					return err
				}
				if _, err := st.Containers().Get(b.Context(), scope, id); err != nil {
					return err
				}
				at := base.Add(time.Duration(clock.Add(1)) * time.Millisecond)
				if err := st.Containers().Touch(b.Context(), scope, id, at); err != nil {
					return err
				}
				return st.Usage().Record(b.Context(), store.UsageEvent{Scope: scope, ContainerID: id, At: at,
					MeteredMillis: 12, BilledMillis: 1000, CostMicroUSD: 100, Kind: "exec"})
			}
			for _, op := range []struct {
				name string
				fn   func(int) error
			}{{"lookup", lookup}, {"exec-path", execPath}} {
				b.Run(op.name+"/serial", func(b *testing.B) {
					for i := 0; b.Loop(); i++ {
						if err := op.fn(i); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
				})
				b.Run(op.name+"/parallel16", func(b *testing.B) {
					b.SetParallelism(16) // × GOMAXPROCS goroutines
					start := time.Now()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := op.fn(int(next.Add(1))); err != nil {
								b.Error(err)
								return
							}
						}
					})
					b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
				})
			}
		})
	}
}
