package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// A warm pool's spare pod: `podagent serve` with SVC_POD_UNASSIGNED and only
// its bootstrap token answers /readyz as unassigned, takes a claim only with
// its bootstrap token, then cold-starts the claimed project on the same
// address and serves it with the project's runtime token; killed and
// started again in the same pod (its data dir), it resumes the claim.
func TestSparePodClaimedServesTheProject(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "fs")
	const boot = "svc_pb_spare-test-bootstrap"
	var vars []string
	for _, v := range e.vars {
		if !strings.HasPrefix(v, "SVC_PROJECT_ID=") && !strings.HasPrefix(v, "SVC_RUNTIME_TOKEN=") {
			vars = append(vars, v)
		}
	}
	e.vars = append(vars, "SVC_POD_UNASSIGNED=true", "SVC_RUNTIME_TOKEN="+boot)
	p := e.start()
	ctx := context.Background()
	base := "http://" + p.addr
	var r wire.PodReadiness
	readyz(t, base, &r)
	if r.Status != wire.PodUnassigned || r.ProjectID != "" {
		t.Fatalf("spare readiness %+v", r)
	}
	claim := wire.PodClaim{ProjectID: "p1", SyncMode: "git_only", Generation: 3, RuntimeToken: token}
	bad := internalapi.PodClient{BaseURL: base, Token: token}
	if _, err := bad.Claim(ctx, claim); !isStatus(err, 401) {
		t.Fatalf("claim with the runtime token instead of the bootstrap token: %v", err)
	}
	pc := internalapi.PodClient{BaseURL: base, Token: boot}
	ans, err := pc.Claim(ctx, claim)
	if err != nil || ans.ProjectID != "p1" || ans.Generation != 3 {
		t.Fatalf("claim: %+v %v\n%s", ans, err, e.logs())
	}
	ready := internalapi.PodClient{BaseURL: base, ProjectID: "p1", Generation: 3}
	waitServes(t, &ready, p, e)
	e.write("a.txt", "a\n")
	if code, body := p.flush(t, `{}`); code != 200 {
		t.Fatalf("flush with the project's token after the claim: %d %s", code, body)
	}
	if _, err := pc.Claim(ctx, wire.PodClaim{ProjectID: "p2", SyncMode: "git_only", Generation: 1, RuntimeToken: "x"}); err == nil {
		t.Error("a serving pod took a second claim")
	}

	// The podagent dies in the claimed pod; the next one resumes the claim.
	_ = p.cmd.Process.Kill()
	<-p.exited
	p2 := e.start()
	ready.BaseURL = "http://" + p2.addr
	waitServes(t, &ready, p2, e)
	e.requireCommitted("a.txt", "a\n")
}

func readyz(t *testing.T, base string, into any) {
	t.Helper()
	res, err := http.Get(base + internalapi.PodReadyz)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(into); err != nil {
		t.Fatal(err)
	}
}

func isStatus(err error, status int) bool {
	se, ok := internalapi.AsStatus(err)
	return ok && se.Status == status
}

// waitServes waits (bounded) until the pod answers /readyz as c's project
// and generation.
func waitServes(t *testing.T, c *internalapi.PodClient, p *proc, e *env) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.Ready(context.Background())
		if err == nil {
			return
		}
		var wrong *wire.WrongPodError
		if errors.As(err, &wrong) {
			t.Fatalf("the pod answers as another: %v", err)
		}
		select {
		case <-p.exited:
			t.Fatalf("podagent exited: %v\n%s", p.err, e.logs())
		case <-time.After(20 * time.Millisecond): // readiness poll with a deadline
		}
		if time.Now().After(deadline) {
			t.Fatalf("the claimed pod never served its project: %v\n%s", err, e.logs())
		}
	}
}
