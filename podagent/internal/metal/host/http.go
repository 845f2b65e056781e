package host

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// Handler is the host's HTTP API (the apiserver's metal driver calls it):
// one route table, every /v1 route behind the host token.
func (h *Host) Handler(token string, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	p := internalapi.MetalHostProjects + "/{id}"
	mux.Handle("PUT "+p, h.auth(token, h.handleEnsure))
	mux.Handle("GET "+p, h.auth(token, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.Status(r.PathValue("id")))
	}))
	mux.Handle("DELETE "+p, h.auth(token, func(w http.ResponseWriter, r *http.Request) {
		st, err := h.Stop(r.Context(), r.PathValue("id"), r.URL.Query().Get("mode"))
		if err != nil {
			hostError(w, r, "stop_failed", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, st)
	}))
	mux.Handle("POST "+p+"/export", h.auth(token, func(w http.ResponseWriter, r *http.Request) {
		if err := h.Export(r.Context(), r.PathValue("id"), r.URL.Query().Get("source") == "true"); err != nil {
			hostError(w, r, "export_failed", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, h.Status(r.PathValue("id")))
	}))
	return mux
}

func (h *Host) handleEnsure(w http.ResponseWriter, r *http.Request) {
	var req wire.MetalStartRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil || req.RuntimeToken == "" {
		hostError(w, r, "invalid_request", "body must be JSON with runtimeToken")
		return
	}
	id := r.PathValue("id")
	if err := ValidProjectID(id); err != nil {
		hostError(w, r, "invalid_request", err.Error())
		return
	}
	st, err := h.Ensure(r.Context(), id, req.RuntimeToken)
	if err != nil {
		hostError(w, r, "agent_start_failed", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Host) auth(token string, fn http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			hostError(w, r, "unauthorized", "a valid host token is required")
			return
		}
		fn(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// hostError is the host's one error writer: the envelope of a code
// declared in wire.Codes (its status and type from there), as both
// binaries answer.
func hostError(w http.ResponseWriter, r *http.Request, code, msg string) {
	wire.Coded(code, msg).Write(w, r, r.URL.Path, nil, nil)
}
