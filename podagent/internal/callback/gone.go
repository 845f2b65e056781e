package callback

import (
	"sync"

	"github.com/svc-dev/svc/shared/webhooksend"
	"github.com/svc-dev/svc/shared/wire"
)

// 410 Gone (docs/webhook-delivery.md "Endpoint health"): the receiver says
// the endpoint no longer exists. The attempt is recorded as failed with
// status 410, which makes the API mark the endpoint failing at once (the
// pod then reads it among the failing endpoints of its channel config);
// until that config arrives the deliverer itself makes no attempt to an
// endpoint that answered 410. Any 2xx from it — a test message, a replay —
// re-enables it.

// ErrEndpointGone reports a delivery to an endpoint that answered 410 Gone.
var ErrEndpointGone = webhooksend.ErrEndpointGone

// goneSet is the endpoints (wire.WebhookEndpoint) that answered 410.
type goneSet struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (g *goneSet) add(url string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]struct{}{}
	}
	g.m[wire.WebhookEndpoint(url)] = struct{}{}
}

func (g *goneSet) clear(url string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, wire.WebhookEndpoint(url))
}

func (g *goneSet) has(url string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.m[wire.WebhookEndpoint(url)]
	return ok
}
