// Package ctxio makes copies stop when their context ends.
package ctxio

import (
	"context"
	"io"
)

// Reader reads from r until ctx is done, then returns ctx's error.
func Reader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
