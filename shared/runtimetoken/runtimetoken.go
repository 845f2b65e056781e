// Package runtimetoken derives and checks the runtime bearer credential a pod
// uses to call the API's /internal routes and the API uses to call the pod's
// /agent routes (spec 5.3). Only the API holds the runtime auth secret; a pod
// is given its own project's token, never the secret.
//
// Token shape: svc_rt_<projectId>.<base64url(HMAC-SHA256(secret, "runtime:"+projectId))>.
// The prefix differs from the public key prefix svc_sk_, so the public API can
// refuse runtime tokens by shape before any lookup (spec 5.1.2).
package runtimetoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

// Prefix starts every runtime token.
const Prefix = "svc_rt_"

// ErrInvalid is returned for malformed tokens and bad signatures.
var ErrInvalid = errors.New("runtimetoken: invalid runtime token")

// Mint returns the runtime token of projectID under secret.
func Mint(secret []byte, projectID string) string {
	return Prefix + projectID + "." + sign(secret, projectID)
}

// Verify checks token against secret and returns the project it belongs to.
// The signature is compared in constant time.
func Verify(secret []byte, token string) (projectID string, err error) {
	if len(secret) == 0 || !strings.HasPrefix(token, Prefix) {
		return "", ErrInvalid
	}
	body := strings.TrimPrefix(token, Prefix)
	dot := strings.LastIndexByte(body, '.')
	if dot <= 0 {
		return "", ErrInvalid
	}
	projectID, sig := body[:dot], body[dot+1:]
	if !hmac.Equal([]byte(sig), []byte(sign(secret, projectID))) {
		return "", ErrInvalid
	}
	return projectID, nil
}

// Equal reports, in constant time, whether got is the token want.
// A pod, which knows only its own token, verifies with this by comparing to it.
func Equal(want, got string) bool {
	return want != "" && hmac.Equal([]byte(want), []byte(got))
}

func sign(secret []byte, projectID string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("runtime:" + projectID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// BootstrapPrefix starts every bootstrap token of a warm pool's spare pod.
const BootstrapPrefix = "svc_pb_"

// Bootstrap is the bootstrap token of the spare pod named podName under
// secret: the credential the API presents when it hands the pod a project
// (wire.PodClaim). It is derived per pod, so a spare pod learns no secret
// another pod shares, and it grants nothing but that one pod's claim.
func Bootstrap(secret []byte, podName string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("pod-bootstrap:" + podName))
	return BootstrapPrefix + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
