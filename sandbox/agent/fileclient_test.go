package agent

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/shellgate/shellgate/sandbox/homefs"
)

// TestClientFileResultsAreHostile: what a hostile agent answers to file
// requests ends the connection as a protocol violation, never reaches the
// caller as a file.
func TestClientFileResultsAreHostile(t *testing.T) {
	entry := func(p string, size int64) FileEntry { return FileEntry{Path: []byte(p), Size: size} }
	// The calls, and what the fake agent sends for request id.
	list := func(o homefs.ListOptions) func(c *Client) error {
		return func(c *Client) error {
			_, err := c.ListFiles(context.Background(), "/h", o)
			return err
		}
	}
	stat := func(c *Client) error {
		_, err := c.StatFile(context.Background(), "/h", "a")
		return err
	}
	read := func(c *Client) error {
		_, r, err := c.OpenFile(context.Background(), "/h", "a", 10)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.ReadAll(r)
		return err
	}
	info := func(f *fakeAgent, id uint32, e FileEntry) {
		writeFrame(f.out, frameFileDone, id, mustJSON(FileResult{Info: &e}))
	}
	for _, tc := range []struct {
		name string
		call func(c *Client) error
		// answer is what the fake agent sends for request id.
		answer func(f *fakeAgent, id uint32)
	}{
		{"list path leaves the home", list(homefs.ListOptions{}), func(f *fakeAgent, id uint32) {
			writeFrame(f.out, frameFileDone, id, mustJSON(FileResult{Files: []FileEntry{entry("../etc/passwd", 1)}}))
		}},
		{"list over the limit", list(homefs.ListOptions{Limit: 1}), func(f *fakeAgent, id uint32) {
			writeFrame(f.out, frameFileDone, id, mustJSON(FileResult{Files: []FileEntry{entry("a", 1), entry("b", 1)}}))
		}},
		{"list out of order", list(homefs.ListOptions{}), func(f *fakeAgent, id uint32) {
			writeFrame(f.out, frameFileDone, id, mustJSON(FileResult{Files: []FileEntry{entry("b", 1), entry("a", 1)}}))
		}},
		{"list mode past permission bits", list(homefs.ListOptions{}), func(f *fakeAgent, id uint32) {
			e := entry("a", 1)
			e.Mode = 0o4755 // setuid: no file the home archive restores may carry it
			writeFrame(f.out, frameFileDone, id, mustJSON(FileResult{Files: []FileEntry{e}}))
		}},
		{"stat of another file", stat, func(f *fakeAgent, id uint32) {
			info(f, id, entry("b", 1))
		}},
		{"read over the cap", func(c *Client) error {
			_, _, err := c.OpenFile(context.Background(), "/h", "a", 10)
			return err
		}, func(f *fakeAgent, id uint32) {
			info(f, id, entry("a", 11))
		}},
		{"read past the size", read, func(f *fakeAgent, id uint32) {
			info(f, id, entry("a", 2))
			writeFrame(f.out, frameData, id, []byte("abc"))
		}},
		{"read ends short", read, func(f *fakeAgent, id uint32) {
			info(f, id, entry("a", 5))
			writeFrame(f.out, frameData, id, []byte("ab"))
			writeFrame(f.out, frameData, id)
		}},
		{"bytes for a stat", func(c *Client) error {
			err := stat(c)
			if err == nil {
				<-c.Done()
				err = c.Err()
			}
			return err
		}, func(f *fakeAgent, id uint32) {
			writeFrame(f.out, frameData, id, []byte("x"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f := dialFake(t)
			go func() {
				typ, id, _ := f.next(t)
				if typ != frameFile {
					t.Errorf("host sent frame type %d", typ)
				}
				tc.answer(f, id)
			}()
			errc := make(chan error, 1)
			go func() { errc <- tc.call(c) }()
			select {
			case err := <-errc:
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("got %v, want a protocol violation", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the call did not end")
			}
			if !f.hostHungUp() {
				t.Fatal("the host kept the connection")
			}
		})
	}
}

// TestClientRefusesFilesOfAnOldAgent: an agent whose Ready does not offer
// file requests would ignore them; the client refuses them at once.
func TestClientRefusesFilesOfAnOldAgent(t *testing.T) {
	hostR, agentW := io.Pipe()
	agentR, hostW := io.Pipe()
	go io.Copy(io.Discard, agentR)
	go writeFrame(agentW, frameReady, 0, mustJSON(Hello{Version: ProtocolVersion, PID: 1}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, hostR, hostW)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.Close(); agentW.Close() }()
	if _, err := c.StatFile(ctx, "/h", "a"); !errors.Is(err, ErrNoFiles) {
		t.Fatalf("stat on an old agent: %v", err)
	}
}
