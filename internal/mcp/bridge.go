package mcp

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bridge serves on local (stdio, for clients that only launch local
// processes: `shellgate mcp`) the MCP server at endpoint (a Shellgate
// server's /mcp, reached with hc, which carries the key): one remote
// session for the local one, so the local session has one container of
// its own. Tool calls, their progress notifications and cancellation,
// resource listings and reads are passed through as they are; a remote
// resources/list_changed becomes a local one. It returns when the local
// client goes away.
func Bridge(ctx context.Context, endpoint string, hc *http.Client, local sdk.Transport, version string) error {
	var (
		srv     atomic.Pointer[sdk.Server]
		localSS atomic.Pointer[sdk.ServerSession]
	)
	client := sdk.NewClient(&sdk.Implementation{Name: "shellgate-mcp", Version: version}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(ctx context.Context, r *sdk.ProgressNotificationClientRequest) {
			if ss := localSS.Load(); ss != nil {
				ss.NotifyProgress(ctx, r.Params)
			}
		},
		ResourceListChangedHandler: func(context.Context, *sdk.ResourceListChangedRequest) {
			// The SDK's server sends list_changed when its own resources
			// change, and has no other way to send one: a placeholder
			// added and removed at once changes nothing a client can list
			// (the bridge answers resources/list from the remote).
			if s := srv.Load(); s != nil {
				s.AddResource(&sdk.Resource{URI: placeholderURI, Name: "changed"}, nil)
				s.RemoveResources(placeholderURI)
			}
		},
	})
	remote, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", endpoint, err)
	}
	defer remote.Close()
	init := remote.InitializeResult()
	// The local session speaks the remote's protocol version or an older
	// one: a call passed through carries the local version.
	var versions []string
	for _, v := range sdk.SupportedProtocolVersions() {
		if v <= init.ProtocolVersion {
			versions = append(versions, v)
		}
	}
	s := sdk.NewServer(init.ServerInfo, &sdk.ServerOptions{
		SupportedProtocolVersions: versions,
		Instructions:              init.Instructions,
		Capabilities:              &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{}, Resources: &sdk.ResourceCapabilities{ListChanged: true}},
	})
	s.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			switch p := req.GetParams().(type) {
			case *sdk.ListToolsParams:
				return remote.ListTools(ctx, p)
			case *sdk.CallToolParamsRaw:
				return remote.CallTool(ctx, &sdk.CallToolParams{Meta: p.Meta, Name: p.Name, Arguments: p.Arguments})
			case *sdk.ListResourcesParams:
				return remote.ListResources(ctx, p)
			case *sdk.ListResourceTemplatesParams:
				return remote.ListResourceTemplates(ctx, p)
			case *sdk.ReadResourceParams:
				return remote.ReadResource(ctx, p)
			}
			return next(ctx, method, req)
		}
	})
	srv.Store(s)
	ss, err := s.Connect(ctx, local, nil)
	if err != nil {
		return err
	}
	localSS.Store(ss)
	return ss.Wait()
}

const placeholderURI = "shellgate://bridge/list-changed"

// KeyClient is an HTTP client that sends key as `Authorization: Bearer`
// on every request: an MCP client of a workspace.
func KeyClient(key string) *http.Client {
	return &http.Client{Transport: bearer{key, http.DefaultTransport}}
}

type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}
