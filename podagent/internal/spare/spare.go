// Package spare is a warm pool's spare pod before and during its claim
// (docs/scale.md, "A warm pool"): `podagent serve` with SVC_POD_UNASSIGNED
// holds no project and no project secret, only its own bootstrap token. It
// serves /healthz, /readyz as unassigned (wire.PodUnassigned) and the claim
// call (internalapi.PodClaim), which hands it a project, a sync mode, a
// generation and the project's runtime token. Once claimed, /readyz answers
// 503 while the pod cold-starts the project (the same cold start as a pod
// created for it, in cmd/podagent), and then the pod's own routes serve on
// the same listener (Handoff).
//
// The claim is kept in the pod's data directory (ClaimFile), which outlives
// the podagent's container: a podagent restarted in a claimed pod resumes
// its claim instead of coming back unassigned.
package spare

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/atomicfile"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/wire"
)

// ClaimFileName is the claim's file in the pod's data directory.
const ClaimFileName = "pod-claim.json"

// Options configure a spare pod.
type Options struct {
	// Bootstrap is the pod's bootstrap token: the only bearer its claim
	// call accepts (compared in constant time).
	Bootstrap string
	// ClaimFile keeps the claim across podagent restarts in the pod.
	ClaimFile string
	Log       *zap.Logger
}

// Spare is the HTTP surface of a spare pod; it is an http.Handler.
type Spare struct {
	o       Options
	claimed chan struct{}

	mu    sync.Mutex
	claim *wire.PodClaim
	pod   http.Handler // the claimed pod's routes, once it is ready
}

// New is a spare pod; a claim kept in o.ClaimFile by an earlier podagent of
// the pod is resumed (Claimed is then closed already).
func New(o Options) (*Spare, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	s := &Spare{o: o, claimed: make(chan struct{})}
	if o.ClaimFile == "" {
		return s, nil
	}
	b, err := os.ReadFile(o.ClaimFile)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the pod's claim: %w", err)
	}
	var cl wire.PodClaim
	if err := json.Unmarshal(b, &cl); err != nil || check(cl) != nil {
		return nil, fmt.Errorf("the pod's claim file %s is unreadable: %v", o.ClaimFile, errors.Join(err, check(cl)))
	}
	s.claim = &cl
	close(s.claimed)
	o.Log.Info("resuming the pod's claim", zap.String("projectId", cl.ProjectID), zap.Int64("generation", cl.Generation))
	return s, nil
}

// Claimed is closed once the pod holds a claim.
func (s *Spare) Claimed() <-chan struct{} { return s.claimed }

// Claim is the pod's claim (the zero claim before Claimed is closed).
func (s *Spare) Claim() wire.PodClaim {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claim == nil {
		return wire.PodClaim{}
	}
	return *s.claim
}

// Handoff serves every request with h from now on: the claimed pod is
// ready.
func (s *Spare) Handoff(h http.Handler) {
	s.mu.Lock()
	s.pod = h
	s.mu.Unlock()
}

// ServeHTTP implements http.Handler.
func (s *Spare) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	pod, claim := s.pod, s.claim
	s.mu.Unlock()
	if pod != nil {
		pod.ServeHTTP(w, r)
		return
	}
	switch {
	case r.URL.Path == internalapi.PodHealthz && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	case r.URL.Path == internalapi.PodReadyz && r.Method == http.MethodGet:
		if claim != nil {
			wire.Coded("not_ready", "the claimed pod is starting project "+claim.ProjectID).Write(w, r, r.URL.Path, nil, s.o.Log)
			return
		}
		writeJSON(w, http.StatusOK, wire.PodReadiness{Status: wire.PodUnassigned})
	case r.URL.Path == internalapi.PodClaim && r.Method == http.MethodPost:
		s.serveClaim(w, r)
	case claim != nil:
		wire.Coded("not_ready", "the claimed pod is starting").Write(w, r, r.URL.Path, nil, s.o.Log)
	default:
		wire.Coded("not_found", "a spare pod serves no project yet").Write(w, r, r.URL.Path, nil, s.o.Log)
	}
}

// serveClaim takes the pod's one claim: 202 for it (and for the same claim
// again, a retried call), 409 pod_claimed for any other.
func (s *Spare) serveClaim(w http.ResponseWriter, r *http.Request) {
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !runtimetoken.Equal(s.o.Bootstrap, bearer) {
		wire.Coded("unauthorized", "the claim takes the pod's bootstrap token").Write(w, r, r.URL.Path, nil, s.o.Log)
		return
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		wire.Coded("invalid_body", "").Write(w, r, r.URL.Path, err, s.o.Log)
		return
	}
	var cl wire.PodClaim
	if err := json.Unmarshal(b, &cl); err != nil {
		wire.Coded("invalid_json", "").Write(w, r, r.URL.Path, err, s.o.Log)
		return
	}
	if err := check(cl); err != nil {
		wire.Coded("invalid_request", err.Error()).Write(w, r, r.URL.Path, err, s.o.Log)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claim != nil {
		if s.claim.ProjectID != cl.ProjectID || s.claim.Generation != cl.Generation {
			wire.Coded("pod_claimed", "").Write(w, r, r.URL.Path, nil, s.o.Log)
			return
		}
		writeJSON(w, http.StatusAccepted, answer(*s.claim))
		return
	}
	if s.o.ClaimFile != "" {
		data, _ := json.Marshal(cl)
		if err := os.MkdirAll(filepath.Dir(s.o.ClaimFile), 0o700); err != nil {
			wire.Internal(err).Write(w, r, r.URL.Path, err, s.o.Log)
			return
		}
		if err := atomicfile.Write(s.o.ClaimFile, data, 0o600); err != nil {
			wire.Internal(err).Write(w, r, r.URL.Path, err, s.o.Log)
			return
		}
	}
	s.claim = &cl
	close(s.claimed)
	s.o.Log.Info("claimed", zap.String("projectId", cl.ProjectID), zap.Int64("generation", cl.Generation),
		zap.String("mode", cl.SyncMode))
	writeJSON(w, http.StatusAccepted, answer(cl))
}

func answer(cl wire.PodClaim) wire.PodClaimAnswer {
	return wire.PodClaimAnswer{ProjectID: cl.ProjectID, Generation: cl.Generation, Status: wire.PodStarting}
}

// check refuses a claim missing a part or naming no sync mode.
func check(cl wire.PodClaim) error {
	switch {
	case cl.ProjectID == "" || strings.ContainsAny(cl.ProjectID, "/\\\x00") || cl.ProjectID == "." || cl.ProjectID == "..":
		return fmt.Errorf("invalid projectId %q", cl.ProjectID)
	case cl.Generation <= 0:
		return errors.New("generation must be positive")
	case cl.RuntimeToken == "":
		return errors.New("runtimeToken is required")
	}
	_, err := syncmode.Parse(cl.SyncMode)
	return err
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
