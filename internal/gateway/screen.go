package gateway

import "context"

// Screen inspects a client request once it is parsed and its model
// resolved, before anything runs: no container is opened and the model is
// not called until it returns. It may rewrite req (a guardrail's
// redaction); an error ends the request, in the client API's envelope (a
// *RequestError with Status 403 for a blocked request).
type Screen func(ctx context.Context, req *Request) error
