package fs

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/wire"
)

// Query parameters of a presigned URL.
const (
	paramExpires = "expires"
	paramSig     = "sig"
)

// PresignGet implements objstore.Store: <BaseURL>/<key>?expires=<unix>&sig=<hmac>.
func (s *Store) PresignGet(ctx context.Context, key string, expiry time.Duration) (string, error) {
	return s.presign(http.MethodGet, key, expiry)
}

// PresignPut implements objstore.Store.
func (s *Store) PresignPut(ctx context.Context, key string, expiry time.Duration) (string, error) {
	return s.presign(http.MethodPut, key, expiry)
}

func (s *Store) presign(method, key string, expiry time.Duration) (string, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return "", fmt.Errorf("%w: %q", err, key)
	}
	if s.opts.BaseURL == "" {
		return "", ErrNoBaseURL
	}
	if expiry <= 0 {
		return "", fmt.Errorf("objstore/fs: presign %q: expiry must be positive, got %v", key, expiry)
	}
	exp := s.opts.Now().Add(expiry).Unix()
	q := url.Values{paramExpires: {strconv.FormatInt(exp, 10)}, paramSig: {s.sign(method, key, exp)}}
	return s.opts.BaseURL + "/" + escapeKey(key) + "?" + q.Encode(), nil
}

// sign is the HMAC-SHA256 of method, key and expiry, base64url.
func (s *Store) sign(method, key string, exp int64) string {
	m := hmac.New(sha256.New, s.opts.SigningKey)
	fmt.Fprintf(m, "%s\n%s\n%d", method, key, exp)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func escapeKey(key string) string {
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	return strings.Join(segs, "/")
}

// Handler serves presigned URLs of s mounted at basePath (the path of
// Options.BaseURL, for example "/objects"). It answers GET and HEAD of URLs
// from PresignGet and PUT of URLs from PresignPut; the signature is checked
// in constant time and the expiry against the store's clock. A PUT body is
// limited to Options.MaxPutBytes. Errors are the service's one envelope
// (wire.Coded): {"error":{"message","type","code"}}.
func Handler(s *Store, basePath string) http.Handler {
	basePath = strings.TrimSuffix(basePath, "/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, basePath+"/")
		if !ok {
			writeError(w, r, wire.CodeNotFound, "no such route")
			return
		}
		key := rest
		if objstore.ValidateKey(key) != nil {
			writeError(w, r, wire.CodeInvalidKey, "invalid object key")
			return
		}
		method := r.Method
		if method == http.MethodHead {
			method = http.MethodGet
		}
		if method != http.MethodGet && method != http.MethodPut {
			w.Header().Set("Allow", "GET, HEAD, PUT")
			writeError(w, r, wire.CodeMethodNotAllowed, "only GET, HEAD and PUT")
			return
		}
		if code, msg := s.verify(method, key, r.URL.Query()); code != "" {
			writeError(w, r, code, msg)
			return
		}
		if method == http.MethodGet {
			s.serveGet(w, r, key)
			return
		}
		s.servePut(w, r, key)
	})
}

func (s *Store) verify(method, key string, q url.Values) (code, msg string) {
	exp, err := strconv.ParseInt(q.Get(paramExpires), 10, 64)
	if err != nil {
		return wire.CodeSignatureInvalid, "missing or malformed expires"
	}
	want := s.sign(method, key, exp)
	if !hmac.Equal([]byte(want), []byte(q.Get(paramSig))) {
		return wire.CodeSignatureInvalid, "signature does not match"
	}
	if s.opts.Now().Unix() > exp {
		return wire.CodeURLExpired, "presigned URL has expired"
	}
	return "", ""
}

func (s *Store) serveGet(w http.ResponseWriter, r *http.Request, key string) {
	f, info, err := s.open(key)
	if errors.Is(err, objstore.ErrNotExist) {
		writeError(w, r, wire.CodeNotFound, "object does not exist")
		return
	}
	if err != nil {
		s.log.Error("presigned get", zap.String("key", key), zap.Error(err))
		writeError(w, r, wire.CodeInternalError, "")
		return
	}
	defer f.Close()
	w.Header().Set("ETag", `"`+info.ETag+`"`)
	if info.ContentType != "" {
		w.Header().Set("Content-Type", info.ContentType)
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	http.ServeContent(w, r, "", info.LastModified, newSection(f, info.Size))
}

func (s *Store) servePut(w http.ResponseWriter, r *http.Request, key string) {
	if r.ContentLength > s.opts.MaxPutBytes {
		writeError(w, r, wire.CodeRequestTooLarge, fmt.Sprintf("body exceeds %d bytes", s.opts.MaxPutBytes))
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxPutBytes)
	info, err := s.Put(r.Context(), key, body, r.ContentLength, objstore.PutOptions{ContentType: r.Header.Get("Content-Type")})
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, r, wire.CodeRequestTooLarge, fmt.Sprintf("body exceeds %d bytes", s.opts.MaxPutBytes))
		return
	case err != nil:
		s.log.Error("presigned put", zap.String("key", key), zap.Error(err))
		writeError(w, r, wire.CodeInternalError, "")
		return
	}
	w.Header().Set("ETag", `"`+info.ETag+`"`)
	w.WriteHeader(http.StatusOK)
}

// writeError answers the one error envelope of the service
// (docs/errors.md) with code's status and type from wire.Codes; a 5xx's
// cause was logged by the caller.
func writeError(w http.ResponseWriter, r *http.Request, code, msg string) {
	wire.Coded(code, msg).Write(w, r, r.URL.Path, nil, nil)
}
