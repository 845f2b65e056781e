// Package publish is the API side of publish as a tag (spec 10.4): it calls
// the pod's POST /agent/git-flush with tag publish/<subdomain>/<unix-ts> and
// a tag message, with the project's runtime token, and returns the pod's
// {sha, tag}. The caller stores Project.publishedCommitSha/publishedTag.
package publish

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// DefaultTimeout bounds the pod call (the pod flushes, commits, persists,
// tags and persists again).
const DefaultTimeout = 2 * time.Minute

// Client is the HTTP client used by Publish.
var Client = &http.Client{Timeout: DefaultTimeout}

var shaRE = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// Publish asks the pod at podURL to flush and tag. subdomain must be one
// lowercase DNS label.
func Publish(ctx context.Context, podURL, runtimeToken, subdomain string, now time.Time) (wire.GitFlushResponse, error) {
	return PublishWith(ctx, Client, podURL, runtimeToken, subdomain, now)
}

// PublishWith is Publish with an explicit HTTP client.
func PublishWith(ctx context.Context, hc *http.Client, podURL, runtimeToken, subdomain string, now time.Time) (wire.GitFlushResponse, error) {
	tag, err := wire.PublishTag(subdomain, now)
	if err != nil {
		return wire.GitFlushResponse{}, fmt.Errorf("publish: %w", err)
	}
	pod := internalapi.PodClient{BaseURL: podURL, Token: runtimeToken, HTTP: hc, Timeout: DefaultTimeout}
	out, err := pod.GitFlush(ctx, wire.GitFlushRequest{Tag: tag,
		TagMessage: "publish " + subdomain + " at " + now.UTC().Format(time.RFC3339)})
	if err != nil {
		return out, fmt.Errorf("publish: %w", err)
	}
	if !shaRE.MatchString(out.SHA) || out.Tag != tag {
		return wire.GitFlushResponse{}, fmt.Errorf("publish: the pod answered sha %q tag %q for tag %q", out.SHA, out.Tag, tag)
	}
	return out, nil
}
