package main

import (
	"context"
	"errors"
	"time"
)

// publishFunc calls a pod's git-flush with a publish tag (spec 10.4); it is
// wired to the publish package once that exists.
var publishFunc = func(ctx context.Context, podURL, token, subdomain string, now time.Time) (string, string, error) {
	return "", "", errors.New("publish: not wired")
}
