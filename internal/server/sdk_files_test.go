package server

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/store/s3blobs"
	"github.com/shellgate/shellgate/sandbox/s3store/s3test"
)

// The official clients, unchanged, against the real server: only the base
// URL and the key differ from talking to OpenAI or Anthropic.

// openAIAt is openai-go on the server at url (its /v1).
func openAIAt(url, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// anthropicAt is the Anthropic SDK on the server at url; opts come after
// the base URL and key, and may replace them.
func anthropicAt(url, key string, opts ...aoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]aoption.RequestOption{aoption.WithBaseURL(url + "/"), aoption.WithAPIKey(key), aoption.WithMaxRetries(0)}, opts...)...)
}

func (e *env) openAI(key string) openai.Client { return openAIAt(e.url, key) }

func (e *env) anthropic(key string, opts ...aoption.RequestOption) anthropic.Client {
	return anthropicAt(e.url, key, opts...)
}

func TestOpenAIContainerFiles(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	ctx := t.Context()
	c := e.create(e.keyA, "")
	e.exec(e.keyA, c.ID, "mkdir -p out && for i in 1 2 3 4 5; do echo $i > out/f$i.txt; done")
	client := e.openAI(e.keyA)

	up, err := client.Containers.Files.New(ctx, c.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("a,b\n1,2\n"), "data.csv", "text/csv")})
	if err != nil {
		t.Fatal(err)
	}
	if up.Path != "/mnt/data/data.csv" || up.Source != "user" || up.Bytes != 8 || up.ContainerID != c.ID || !strings.HasPrefix(up.ID, "cfile_") {
		t.Fatalf("New: %+v", up)
	}
	got, err := client.Containers.Files.Get(ctx, c.ID, up.ID)
	if err != nil || got.Path != up.Path || got.Bytes != 8 || got.CreatedAt == 0 {
		t.Fatalf("Get: %+v %v", got, err)
	}

	// Auto-paging, two per page, default order (descending paths).
	var listed []string
	iter := client.Containers.Files.ListAutoPaging(ctx, c.ID, openai.ContainerFileListParams{Limit: openai.Int(2)})
	for iter.Next() {
		listed = append(listed, iter.Current().Path)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"/mnt/data/out/f5.txt", "/mnt/data/out/f4.txt", "/mnt/data/out/f3.txt", "/mnt/data/out/f2.txt", "/mnt/data/out/f1.txt", "/mnt/data/data.csv"}
	if !slices.Equal(listed, want) {
		t.Fatalf("listed %q, want %q", listed, want)
	}
	page, err := client.Containers.Files.List(ctx, c.ID, openai.ContainerFileListParams{Order: openai.ContainerFileListParamsOrderAsc, Limit: openai.Int(1)})
	if err != nil || len(page.Data) != 1 || page.Data[0].Path != "/mnt/data/data.csv" || !page.HasMore {
		t.Fatalf("asc page: %+v %v", page, err)
	}

	resp, err := client.Containers.Files.Content.Get(ctx, c.ID, up.ID)
	if b := bodyOf(t, resp, err); string(b) != "a,b\n1,2\n" {
		t.Fatalf("content %q", b)
	}

	// A workspace file copied in by id (the SDK sends file_id as multipart).
	wf, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("from the workspace\n"), "notes.txt", "text/plain"), Purpose: openai.FilePurposeUserData})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := client.Containers.Files.New(ctx, c.ID, openai.ContainerFileNewParams{FileID: openai.String(wf.ID)})
	if err != nil || cp.Path != "/mnt/data/notes.txt" || cp.Bytes != 19 {
		t.Fatalf("New by file_id: %+v %v", cp, err)
	}
	if r := e.exec(e.keyA, c.ID, "cat notes.txt"); r.Output[0].Stdout != "from the workspace\n" {
		t.Fatalf("copied file in the sandbox: %q", r.Output[0].Stdout)
	}

	if err := client.Containers.Files.Delete(ctx, c.ID, up.ID); err != nil {
		t.Fatal(err)
	}
	_, err = client.Containers.Files.Get(ctx, c.ID, up.ID)
	var apiErr *openai.Error
	if !asErr(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Type != "invalid_request_error" {
		t.Fatalf("Get after Delete: %v", err)
	}
	// Another workspace's key sees nothing, in OpenAI's error envelope.
	other := e.openAI(e.keyB)
	_, err = other.Containers.Files.Get(ctx, c.ID, cp.ID)
	if !asErr(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Message == "" {
		t.Fatalf("another workspace: %v", err)
	}
}

func TestWorkspaceFilesSDKs(t *testing.T) {
	workspaceFilesSDKs(t, newEnv(t, "crun", "busybox"))
}

// The same with the file bytes in S3 (versitygw), as `serve --storage s3://…`.
func TestWorkspaceFilesSDKsS3(t *testing.T) {
	s3 := s3test.Open(t, s3test.NewBucket(t))
	workspaceFilesSDKs(t, newEnv(t, "crun", "busybox", func(c *Config) { c.Blobs = s3blobs.New(s3) }))
}

func workspaceFilesSDKs(t *testing.T, e *env) {
	ctx := t.Context()

	t.Run("01 openai-go Files", func(t *testing.T) {
		client := e.openAI(e.keyA)
		var ids []string
		for i, name := range []string{"a.csv", "b.csv", "c.csv"} {
			f, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(strings.Repeat("x", i+1)), name, "text/csv"), Purpose: openai.FilePurposeAssistants})
			if err != nil {
				t.Fatal(err)
			}
			if f.Filename != name || f.Bytes != int64(i+1) || f.Purpose != openai.FileObjectPurposeAssistants || f.Status != "processed" || f.CreatedAt == 0 {
				t.Fatalf("New: %+v", f)
			}
			ids = append(ids, f.ID)
		}
		got, err := client.Files.Get(ctx, ids[1])
		if err != nil || got.Filename != "b.csv" {
			t.Fatalf("Get: %+v %v", got, err)
		}
		var listed []string
		iter := client.Files.ListAutoPaging(ctx, openai.FileListParams{Limit: openai.Int(2), Order: openai.FileListParamsOrderAsc})
		for iter.Next() {
			listed = append(listed, iter.Current().ID)
		}
		if iter.Err() != nil || !slices.Equal(listed, ids) {
			t.Fatalf("listed %v %v, want %v", listed, iter.Err(), ids)
		}
		resp, err := client.Files.Content(ctx, ids[2])
		if b := bodyOf(t, resp, err); string(b) != "xxx" {
			t.Fatalf("content %q", b)
		}
		del, err := client.Files.Delete(ctx, ids[0])
		if err != nil || !del.Deleted || del.ID != ids[0] {
			t.Fatalf("Delete: %+v %v", del, err)
		}
		var apiErr *openai.Error
		if _, err := client.Files.Get(ctx, ids[0]); !asErr(err, &apiErr) || apiErr.StatusCode != 404 {
			t.Fatalf("Get after Delete: %v", err)
		}
		other := e.openAI(e.keyB)
		if _, err := other.Files.Get(ctx, ids[1]); !asErr(err, &apiErr) || apiErr.StatusCode != 404 {
			t.Fatalf("another workspace: %v", err)
		}
	})

	t.Run("02 anthropic-sdk-go Beta.Files", func(t *testing.T) {
		client := e.anthropic(e.keyA)
		betas := []anthropic.AnthropicBeta{anthropic.AnthropicBetaFilesAPI2025_04_14}
		var ids []string
		for _, name := range []string{"sales.csv", "notes.txt", "chart.png"} {
			f, err := client.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{File: anthropic.File(strings.NewReader("bytes of "+name), name, "application/octet-stream"), Betas: betas})
			if err != nil {
				t.Fatal(err)
			}
			if f.Filename != name || f.SizeBytes != int64(len("bytes of "+name)) || f.Type != "file" || f.CreatedAt.IsZero() || !f.Downloadable {
				t.Fatalf("Upload: %s", f.RawJSON())
			}
			ids = append(ids, f.ID)
		}
		meta, err := client.Beta.Files.GetMetadata(ctx, ids[0], anthropic.BetaFileGetMetadataParams{Betas: betas})
		if err != nil || meta.MimeType != "text/csv" || meta.Filename != "sales.csv" {
			t.Fatalf("GetMetadata: %+v %v", meta, err)
		}
		// Newest first, auto-paged one at a time; the OpenAI-only files of
		// the first subtest are in the list too.
		var listed []string
		iter := client.Beta.Files.ListAutoPaging(ctx, anthropic.BetaFileListParams{Limit: anthropic.Int(1), Betas: betas})
		for iter.Next() {
			listed = append(listed, iter.Current().ID)
		}
		if iter.Err() != nil || len(listed) != 5 || !slices.Equal(listed[:3], []string{ids[2], ids[1], ids[0]}) {
			t.Fatalf("listed %v %v", listed, iter.Err())
		}
		resp, err := client.Beta.Files.Download(ctx, ids[1], anthropic.BetaFileDownloadParams{Betas: betas})
		if b := bodyOf(t, resp, err); string(b) != "bytes of notes.txt" {
			t.Fatalf("Download %q", b)
		}
		del, err := client.Beta.Files.Delete(ctx, ids[1], anthropic.BetaFileDeleteParams{Betas: betas})
		if err != nil || del.ID != ids[1] || del.Type != "file_deleted" {
			t.Fatalf("Delete: %+v %v", del, err)
		}
		var apiErr *anthropic.Error
		if _, err := client.Beta.Files.GetMetadata(ctx, ids[1], anthropic.BetaFileGetMetadataParams{Betas: betas}); !asErr(err, &apiErr) || apiErr.StatusCode != 404 || !strings.Contains(apiErr.RawJSON(), `"not_found_error"`) {
			t.Fatalf("GetMetadata after Delete: %v", err)
		}
		other := e.anthropic(e.keyB)
		if _, err := other.Beta.Files.GetMetadata(ctx, ids[0], anthropic.BetaFileGetMetadataParams{Betas: betas}); !asErr(err, &apiErr) || apiErr.StatusCode != 404 {
			t.Fatalf("another workspace: %v", err)
		}
	})

	t.Run("03 OpenRouter shape over HTTP, and bad uploads keep nothing", func(t *testing.T) {
		var f orFile
		st, b := e.upload("/api/v1/files", e.keyA, part{name: "file", filename: "r.json", content: `{"a":1}`}, part{name: "purpose", content: "user_data"})
		e.must(st, b, &f)
		if f.Shape != "openrouter" || f.MimeType != "application/json" || f.SizeBytes != 7 || f.Purpose != "user_data" || f.Source != "upload" {
			t.Fatalf("upload: %s", b)
		}
		count := func() int {
			var l struct {
				Data []orFile `json:"data"`
			}
			st, b := e.do("GET", "/api/v1/files?limit=1000", e.keyA, nil)
			e.must(st, b, &l)
			return len(l.Data)
		}
		n := count()
		for _, tc := range []struct {
			what  string
			parts []part
			want  int
		}{
			{"no file", []part{{name: "purpose", content: "x"}}, 400},
			{"a field after the file", []part{{name: "file", filename: "a", content: "x"}, {name: "colour", content: "red"}}, 400},
			{"two files", []part{{name: "file", filename: "a", content: "x"}, {name: "file", filename: "b", content: "y"}}, 400},
			{"empty purpose", []part{{name: "file", filename: "a", content: "x"}, {name: "purpose", content: ""}}, 400},
		} {
			st, b := e.upload("/api/v1/files", e.keyA, tc.parts...)
			if st != tc.want {
				t.Errorf("%s: %d %s", tc.what, st, b)
				continue
			}
			envelope(t, st, b)
		}
		for _, p := range []string{"?limit=0", "?limit=1001", "?order=up", "?after=nope", "?after=file_00000000000000000000000000000000", "?x=1"} {
			if st, b := e.do("GET", "/api/v1/files"+p, e.keyA, nil); st != 400 {
				t.Errorf("list %s: %d %s", p, st, b)
			}
		}
		if got := count(); got != n {
			t.Errorf("refused uploads left files: %d -> %d", n, got)
		}
		// Anthropic's envelope on /v1 when the request is Anthropic's.
		st, b = e.doH("GET", "/v1/files/nope", nil, map[string]string{"x-api-key": e.keyA, "anthropic-version": "2023-06-01"})
		// wire-formats §3.7: the envelope carries the request's id.
		var ae anthropicErrorBody
		if st != 404 || json.Unmarshal(b, &ae) != nil || ae.Type != "error" || ae.Error.Type != "not_found_error" || !strings.HasPrefix(ae.RequestID, "req_") {
			t.Errorf("anthropic 404: %d %s", st, b)
		}
		st, b = e.doH("GET", "/v1/files", nil, map[string]string{"anthropic-version": "2023-06-01"})
		if st != 401 || json.Unmarshal(b, &ae) != nil || ae.Error.Type != "authentication_error" {
			t.Errorf("anthropic 401: %d %s", st, b)
		}
	})
	t.Run("04 an orphaned blob is swept, the workspace's files are not", func(t *testing.T) {
		// Bytes stored without a record, as a crash between the two leaves them.
		orphan := store.NewID("file")
		if _, err := e.srv.cfg.Blobs.Put(ctx, orphan, strings.NewReader("left behind"), 100); err != nil {
			t.Fatal(err)
		}
		var l struct {
			Data []orFile `json:"data"`
		}
		st, b := e.do("GET", "/api/v1/files?limit=1000", e.keyA, nil)
		e.must(st, b, &l)
		if len(l.Data) == 0 {
			t.Fatal("the earlier cases left no files to keep")
		}
		// Young, it may be an upload whose record is on its way.
		if n, err := e.srv.SweepBlobs(ctx); err != nil || n != 0 {
			t.Fatalf("the server's sweep of a young orphan: %d, %v", n, err)
		}
		// Once old enough (the cutoff moved instead of the clock), it goes.
		if n, err := store.SweepBlobs(ctx, e.srv.cfg.Blobs, e.srv.cfg.Files, time.Now().Add(time.Minute)); err != nil || n != 1 {
			t.Fatalf("a sweep past the orphan's age: %d, %v; want 1", n, err)
		}
		if _, _, err := e.srv.cfg.Blobs.Open(ctx, orphan); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the orphan is still there: %v", err)
		}
		for _, f := range l.Data {
			if st, _, _ := e.getRaw("/api/v1/files/"+f.ID+"/content", e.keyA); st != 200 {
				t.Errorf("file %s after the sweep: %d", f.ID, st)
			}
		}
	})
}

func asErr[T error](err error, target *T) bool { return errors.As(err, target) }
