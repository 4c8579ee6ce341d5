package storetest

import (
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// listed is a record as a listing orders it.
type listed struct {
	at time.Time
	id string
}

// listOrder returns the ids of rows in list order: ascending created, then
// id (checkPages's want).
func listOrder(rows []listed) []string {
	sort.Slice(rows, func(i, j int) bool {
		if !rows[i].at.Equal(rows[j].at) {
			return rows[i].at.Before(rows[j].at)
		}
		return rows[i].id < rows[j].id
	})
	var want []string
	for _, r := range rows {
		want = append(want, r.id)
	}
	return want
}

// checkPages walks a listing page by page in both orders with several
// page sizes and checks it against want, the ids in ascending (created,
// id) order. list lists within the scope that holds want.
func checkPages[T any](t *testing.T, want []string, list func(store.ListOptions) (store.Page[T], error), id func(T) string) {
	t.Helper()
	desc := slices.Clone(want)
	slices.Reverse(desc)
	for _, order := range []string{"", store.Asc, store.Desc} {
		exp := want
		if order == store.Desc {
			exp = desc
		}
		for _, limit := range []int{1, 7, len(want) - 1, len(want), len(want) + 1, store.MaxPageSize} {
			if limit < 1 {
				continue
			}
			var got []string
			after := ""
			for pages := 0; ; pages++ {
				if pages > len(want)+1 {
					t.Fatalf("order %q limit %d: the listing does not end", order, limit)
				}
				p, err := list(store.ListOptions{After: after, Limit: limit, Order: order})
				if err != nil {
					t.Fatalf("order %q limit %d after %q: %v", order, limit, after, err)
				}
				if len(p.Items) > limit {
					t.Fatalf("order %q limit %d: a page of %d", order, limit, len(p.Items))
				}
				for _, it := range p.Items {
					got = append(got, id(it))
				}
				wantMore := len(got) < len(exp)
				if p.HasMore != wantMore {
					t.Fatalf("order %q limit %d after %q: has_more %v with %d of %d listed", order, limit, after, p.HasMore, len(got), len(exp))
				}
				if !p.HasMore {
					break
				}
				after = got[len(got)-1]
			}
			if !slices.Equal(got, exp) {
				t.Fatalf("order %q limit %d:\n got %v\nwant %v", order, limit, got, exp)
			}
		}
	}
	// After the last item: an empty page with nothing more.
	if len(want) > 0 {
		p, err := list(store.ListOptions{After: want[len(want)-1], Limit: 10})
		if err != nil || len(p.Items) != 0 || p.HasMore {
			t.Fatalf("after the last item: %d items, has_more %v, %v", len(p.Items), p.HasMore, err)
		}
		p, err = list(store.ListOptions{After: want[0], Limit: 10, Order: store.Desc})
		if err != nil || len(p.Items) != 0 || p.HasMore {
			t.Fatalf("after the first item, descending: %d items, has_more %v, %v", len(p.Items), p.HasMore, err)
		}
	}
	for _, bad := range []store.ListOptions{{Limit: 0}, {Limit: -1}, {Limit: store.MaxPageSize + 1}, {Limit: 10, Order: "sideways"}} {
		_, err := list(bad)
		wantErr(t, err, store.ErrInvalid, "list options")
	}
}
