// Package publish is the API side of publish as a tag (spec 10.4): it calls
// the pod's POST /agent/git-flush with tag publish/<subdomain>/<unix-ts> and
// a tag message, with the project's runtime token, and returns the pod's
// {sha, tag}. The caller stores Project.publishedCommitSha/publishedTag.
package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/svc-dev/svc/shared/wire"
)

// DefaultTimeout bounds the pod call (the pod flushes, commits, persists,
// tags and persists again).
const DefaultTimeout = 2 * time.Minute

// Client is the HTTP client used by Publish.
var Client = &http.Client{Timeout: DefaultTimeout}

// PodError is a non-2xx answer of the pod.
type PodError struct {
	Status int
	Body   wire.ErrorBody
}

func (e *PodError) Error() string {
	return fmt.Sprintf("publish: pod answered %d: %s: %s", e.Status, e.Body.Error.Code, e.Body.Error.Message)
}

var shaRE = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// Publish asks the pod at podURL to flush and tag. subdomain must be one
// lowercase DNS label.
func Publish(ctx context.Context, podURL, runtimeToken, subdomain string, now time.Time) (wire.GitFlushResponse, error) {
	return PublishWith(ctx, Client, podURL, runtimeToken, subdomain, now)
}

// PublishWith is Publish with an explicit HTTP client.
func PublishWith(ctx context.Context, hc *http.Client, podURL, runtimeToken, subdomain string, now time.Time) (wire.GitFlushResponse, error) {
	var out wire.GitFlushResponse
	tag, err := wire.PublishTag(subdomain, now)
	if err != nil {
		return out, fmt.Errorf("publish: %w", err)
	}
	u, err := url.Parse(podURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return out, fmt.Errorf("publish: invalid pod URL %q", podURL)
	}
	if runtimeToken == "" {
		return out, errors.New("publish: no runtime token")
	}
	body, _ := json.Marshal(wire.GitFlushRequest{Tag: tag, TagMessage: "publish " + subdomain + " at " + now.UTC().Format(time.RFC3339)})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(podURL, "/")+"/agent/git-flush", bytes.NewReader(body))
	if err != nil {
		return out, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+runtimeToken)
	resp, err := hc.Do(req)
	if err != nil {
		return out, fmt.Errorf("publish: calling the pod: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		pe := &PodError{Status: resp.StatusCode}
		_ = json.Unmarshal(b, &pe.Body)
		return out, pe
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("publish: decoding the pod's answer: %w", err)
	}
	if !shaRE.MatchString(out.SHA) || out.Tag != tag {
		return wire.GitFlushResponse{}, fmt.Errorf("publish: the pod answered sha %q tag %q for tag %q", out.SHA, out.Tag, tag)
	}
	return out, nil
}
