package outbox

import (
	"github.com/svc-dev/svc/shared/internalapi"
)

// permanent reports whether the API will never take this message
// (internalapi.Permanent, the one rule of every pod→API client: an invalid
// or oversized payload, a channel that is not the project's).
func permanent(e *internalapi.StatusError) bool { return internalapi.Permanent(e) }
