package main

import (
	"context"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/publish"
)

// publishFunc calls a pod's git-flush with a publish tag (spec 10.4).
var publishFunc = func(ctx context.Context, podURL, token, subdomain string, now time.Time) (string, string, error) {
	res, err := publish.Publish(ctx, podURL, token, subdomain, now)
	return res.SHA, res.Tag, err
}
